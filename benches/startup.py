#!/usr/bin/env python3
"""Start-up time of `esr serve`, cold (compiling components) against warm
(compiled components from <data-dir>/component-cache), medians of 5 runs
each, alternating in one run. Usage: make host plugins && python3 benches/startup.py"""
import subprocess, time, sys, shutil, os, signal
data = "target/bench/startup-data"
shutil.rmtree(data, ignore_errors=True)
def start():
    t = time.monotonic()
    p = subprocess.Popen(["target/debug/esr","serve","--demo","--listen","127.0.0.1:0","--data-dir",data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("listening on"):
            break
    el = time.monotonic() - t
    p.send_signal(signal.SIGTERM); p.wait()
    return el
first = start()  # seeds demo + compiles + fills the cache
cold, warm = [], []
for i in range(5):
    shutil.rmtree(os.path.join(data, "component-cache"), ignore_errors=True)
    cold.append(start())
    warm.append(start())
med = lambda xs: sorted(xs)[len(xs)//2]
print(f"first run (seed + compile): {first:.3f}s")
print(f"cold (compile) median {med(cold):.3f}s {['%.3f'%x for x in cold]}")
print(f"warm (cache)   median {med(warm):.3f}s {['%.3f'%x for x in warm]}")
