"""Verifies webhook deliveries with the Standard Webhooks reference
library (`standardwebhooks` from PyPI), independently of esr's signer.

Reads {"secret": "whsec_…", "deliveries": [{"headers": {…}, "body": "…"}]}
on standard input; prints one JSON line per delivery: {"ok": true} or
{"ok": false, "error": "…"}.
"""

import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> None:
    request = json.load(sys.stdin)
    webhook = Webhook(request["secret"])
    for delivery in request["deliveries"]:
        try:
            webhook.verify(delivery["body"], delivery["headers"])
            print(json.dumps({"ok": True}))
        except Exception as error:  # the verifier's refusal, whatever its kind
            print(json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"}))


if __name__ == "__main__":
    main()
