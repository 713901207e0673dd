#!/usr/bin/env python3
"""Attributes a profile of `esr-bench --boundary-only` to the phases of a
component call, from `perf script` of a DWARF call-graph recording:

    perf record -F 999 --call-graph dwarf,32768 -D 7000 -o boundary.perf -- \
        target/debug/esr-bench --plugins-dir target/plugins --out target/bench \
        --boundary-only --boundary-case 'finding by id' --rounds 40
    perf script -i boundary.perf --no-inline | dev-tools/bench/scripts/boundary-phases.py

Under load, the server's own profile: `--under-load wasm|native` counts
every sample of a `perf record --call-graph dwarf -p <server pid>` taken
while wrk runs (docs/performance.md has the commands), with the server's
other work (HTTP, the runtime's threads, authentication, the kernel) as
phases of their own:

    perf script -i load.perf --no-inline | \
        dev-tools/bench/scripts/boundary-phases.py --under-load wasm

A sample belongs to the first phase whose pattern a frame matches, frames
taken from the outermost in; store reads first, wherever they are, since
both modes make them alike. Samples whose stack perf could not unwind to
the loop (through guest code, it often cannot) are counted apart."""
import collections
import re
import sys

STORE_READS = r"(esr_store_sled|sled::|TenantSession::get|StoreReader)"
PHASES = [
    ("store and WASI context", r"esr_runtime::engine::new_store"),
    ("instantiation", r"(ResourcePre::handler|InstancePre<.*>::instantiate|Instantiator::|allocate_instance|"
     r"CompiledFunctionsTable|store_invariant_func|OwnedImports|lookup_vmdef|get_func_ref|GuestIndices|"
     r"ModuleRegistry|bforest|InstancePre|Func::typed|bump_resource)"),
    ("teardown: PAGEMAP_SCAN of the memory", r"(pagemap_scan|_ioctl)"),
    ("teardown: zeroing written pages", r"memset"),
    ("teardown: tables and the rest", r"drop_in_place<wasmtime::runtime::store::Store<"),
    ("host-call crossings and copies", r"(HostFn::|HostFunc|cabi_entrypoint|esr_runtime::call::|LowerContext|Lower>|Lift|typed::)"),
]


def stacks(lines):
    stack = []
    for line in lines:
        if not line.strip():
            if stack:
                yield stack
            stack = []
        elif line[0] in " \t":
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                stack.append(parts[1])
    if stack:
        yield stack


def phase_of(stack):
    text = "\n".join(stack)
    if re.search(STORE_READS, text):
        return "store reads (both modes)"
    if "drop_in_place<wasmtime::runtime::store::Store<" in text:
        for name, pattern in PHASES[2:5]:
            if re.search(pattern, text):
                return name
    for frame in reversed(stack):
        for name, pattern in PHASES:
            if re.search(pattern, frame):
                return name
    if ".cwasm" in stack[0]:
        return "guest code"
    return "rest of the call"


SERVER_WORK = [
    ("authentication and limits", r"(esr_auth::|known_keys|esr_api::limits|Quota|rate_limit)"),
    ("HTTP (hyper, axum) and the async runtime", r"(hyper::|axum::|tokio::|tower::|h2::|http::)"),
]


def phase_under_load(stack, mode):
    text = "\n".join(stack)
    if re.search(STORE_READS, text):
        return "store reads (both modes)"
    if mode == "wasm" and ("wasmtime" in text or ".cwasm" in text or "esr_runtime" in text):
        return phase_of(stack)
    if mode == "native" and "esr::native::" in text:
        return "the handler's code (native)"
    # The rest by its innermost frame: the middleware wraps the handler,
    # and the runtime wraps everything.
    if stack and "[kernel" in stack[0]:
        return "kernel (sockets, scheduling)"
    for frame in stack:
        for name, pattern in SERVER_WORK:
            if re.search(pattern, frame):
                return name
    return "rest of the server"


if len(sys.argv) == 3 and sys.argv[1] == "--under-load":
    mode = sys.argv[2]
    phases = collections.Counter(phase_under_load(stack, mode) for stack in stacks(sys.stdin))
    total = sum(phases.values()) or 1
    print(f"{mode} under load: {total} samples")
    for name, count in phases.most_common():
        print(f"  {name:<44} {count:>7} {100 * count / total:6.1f} %")
    sys.exit(0)

counts = {"wasm": collections.Counter(), "native": collections.Counter()}
unwound = 0
for stack in stacks(sys.stdin):
    text = "\n".join(stack)
    if "boundary::time_block" not in text:
        unwound += 1
        continue
    mode = "native" if "esr::native::" in text else "wasm"
    counts[mode][phase_of(stack) if mode == "wasm" else "all"] += 1

for mode, phases in counts.items():
    total = sum(phases.values()) or 1
    print(f"{mode}: {total} samples")
    for name, count in phases.most_common():
        print(f"  {name:<40} {count:>7} {100 * count / total:6.1f} %")
print(f"not unwound to the loop: {unwound} samples")
