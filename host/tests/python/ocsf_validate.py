"""Validates OCSF events, one JSON object per line (NDJSON), against the
published OCSF schema as the ocsf-json-schema package ships it (the
schema server's own export of each version), independently of esr's code.

    python ocsf_validate.py [--ocsf-version 1.6.0] [FILE | -]

Each event is checked against the JSON Schema of its class (`class_uid`),
with the profiles it names in `metadata.profiles`: required attributes,
types, enum ids, patterns, the classes' and objects' constraints (at least
one of, just one of), no attribute the schema does not define, and no
deprecated attribute. Then what JSON Schema cannot say: `type_uid` is
`class_uid * 100 + activity_id`, `metadata.version` is the version checked
against, and each enum id's sibling string is the id's caption (or, for
99 "Other", present with the source's own value).

Prints every failure as `line N: <path>: <message>` and exits 1 if there
is any (or no event at all); else prints the count and exits 0.
"""

import argparse
import json
import sys

from jsonschema import Draft202012Validator, ValidationError, validators
from ocsf_json_schema import OcsfJsonSchemaEmbedded, get_ocsf_schema, get_packaged_versions

OTHER = 99


def _deprecated(_validator, deprecated, _instance, _schema):
    # JSON Schema only annotates `deprecated`; here using one is a failure.
    if deprecated:
        yield ValidationError("deprecated attribute")


StrictValidator = validators.extend(Draft202012Validator, {"deprecated": _deprecated})


class OcsfValidator:
    def __init__(self, version):
        if version not in get_packaged_versions():
            raise SystemExit(f"OCSF {version} is not packaged; have {sorted(get_packaged_versions())}")
        self.version = version
        self.raw = get_ocsf_schema(version)
        self.schema = OcsfJsonSchemaEmbedded(self.raw)
        self.validators = {}

    def _validator(self, class_name, profiles):
        key = (class_name, tuple(sorted(profiles)))
        if key not in self.validators:
            json_schema = self.schema.get_class_schema(class_name, list(profiles))
            StrictValidator.check_schema(json_schema)
            self.validators[key] = StrictValidator(json_schema)
        return self.validators[key]

    def errors(self, event):
        """Every problem of one event, as (path, message)."""
        if not isinstance(event, dict):
            return [("$", "not a JSON object")]
        class_uid = event.get("class_uid")
        if not isinstance(class_uid, int) or isinstance(class_uid, bool):
            return [("$.class_uid", "missing or not an integer: the event's class is unknown")]
        try:
            class_name = self.schema.lookup_class_name_from_uid(class_uid)
        except ValueError:
            return [("$.class_uid", f"{class_uid} is no class of OCSF {self.version}")]
        profiles = (event.get("metadata") or {}).get("profiles") or []
        if not isinstance(profiles, list) or not all(isinstance(p, str) for p in profiles):
            profiles = []
        problems = []
        for error in self._validator(class_name, profiles).iter_errors(event):
            problems.append((error.json_path, error.message))
        problems.extend(self._semantics(event, class_name))
        return sorted(problems)

    def _semantics(self, event, class_name):
        problems = []
        activity_id, type_uid = event.get("activity_id"), event.get("type_uid")
        if isinstance(activity_id, int) and type_uid != event["class_uid"] * 100 + activity_id:
            problems.append(("$.type_uid", f"{type_uid!r} is not class_uid * 100 + activity_id"))
        version = (event.get("metadata") or {}).get("version")
        if version != self.version:
            problems.append(("$.metadata.version", f"{version!r}, validated against OCSF {self.version}"))
        attributes = self.raw["classes"][class_name]["attributes"]
        self._siblings(event, attributes, "$", problems)
        return problems

    def _siblings(self, instance, attributes, path, problems):
        """Enum siblings, walking the objects the schema defines."""
        for name, value in instance.items():
            attribute = attributes.get(name)
            if attribute is None:
                continue  # JSON Schema reports it
            sibling, enum = attribute.get("sibling"), attribute.get("enum")
            if sibling and enum and isinstance(value, int) and str(value) in enum:
                caption = enum[str(value)].get("caption")
                text = instance.get(sibling)
                if value == OTHER:
                    if not isinstance(text, str) or not text:
                        problems.append((f"{path}.{sibling}", f"{name} is 99 (Other): the source's own value is missing"))
                elif text is not None and text != caption:
                    problems.append((f"{path}.{sibling}", f"{text!r} is not the caption of {name} {value}, {caption!r}"))
            object_type = attribute.get("object_type")
            if attribute.get("type") == "object_t" and object_type in self.raw["objects"]:
                inner = self.raw["objects"][object_type]["attributes"]
                items = value if isinstance(value, list) else [value]
                for index, item in enumerate(items):
                    if isinstance(item, dict):
                        where = f"{path}.{name}[{index}]" if isinstance(value, list) else f"{path}.{name}"
                        self._siblings(item, inner, where, problems)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default="-", help="NDJSON of OCSF events ('-' or none: stdin)")
    parser.add_argument("--ocsf-version", default="1.6.0")
    args = parser.parse_args()
    validator = OcsfValidator(args.ocsf_version)
    stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    events, failed = 0, 0
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            events += 1
            try:
                event = json.loads(line)
            except json.JSONDecodeError as error:
                problems = [("$", f"not JSON: {error}")]
            else:
                problems = validator.errors(event)
            if problems:
                failed += 1
            for path, message in problems:
                # A oneOf or pattern failure quotes the whole value or regex.
                if len(message) > 300:
                    message = message[:300] + "…"
                print(f"line {number}: {path}: {message}")
    if events == 0:
        print("no OCSF event to validate")
        return 1
    if failed:
        print(f"{failed} of {events} events invalid against OCSF {args.ocsf_version}")
        return 1
    print(f"{events} events valid against OCSF {args.ocsf_version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
