#!/usr/bin/env python3
"""n-gram speculation under continuous batching: `octet serve` plain, with
fixed draft lengths and with automatic ones, side by side.

Three servers of the same model run at once (each --slots N, --threads T);
each round sends the same N greedy completion requests to each of them in
turn (a different one first each round), all N at once, and times the round. The figure is each server's median
aggregate tokens/s over the rounds, and its ratio to the plain server's. The
replies' texts must equal the plain server's (the script fails otherwise).
Prints a table and one JSON document.

  tests/bench/serve_speculative.py [--octet build/default/bin/octet]
      [--model resources/models/nanochat-demo] [--rounds 15] [--slots 4]
      [--threads 1] [--max-tokens 64] [--draft-tokens 4]

The prompts repeat a sentence the trained demo model goes on to copy (the
case prompt lookup is for); there is one request per slot, so every step
decodes all of them. The servers share the machine: its changing load hits
the three alike, round by round.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCES = [
    ("And the LORD said unto Moses, Speak unto the children of Israel, and say unto them. ",
     "And the LORD said unto Moses,"),
    ("The quick brown fox jumps over the lazy dog. ", "The quick"),
    ("In the beginning God created the heaven and the earth. ", "In the"),
    ("And the LORD said unto Moses, Speak unto the children of Israel, and say unto them. ",
     "And the LORD"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(octet, model, slots, threads, extra):
    port = free_port()
    proc = subprocess.Popen(
        [octet, "serve", "--model", model, "--port", str(port), "--grpc-port", "off", "--slots",
         str(slots), "--threads", str(threads)] + extra,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"serve_speculative: the server {' '.join(extra) or '(plain)'} exited "
                     f"with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("serve_speculative: a server did not answer within 60 s")


def complete(port, prompt, max_tokens, out, i):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        out[i] = json.loads(r.read())


def one_round(port, prompts, max_tokens):
    out = [None] * len(prompts)
    threads = [threading.Thread(target=complete, args=(port, p, max_tokens, out, i))
               for i, p in enumerate(prompts)]
    start_s = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start_s
    if any(o is None for o in out):
        sys.exit("serve_speculative: a request failed")
    tokens = sum(o["usage"]["completion_tokens"] for o in out)
    drafted = sum(o.get("timings", {}).get("drafted_tokens", 0) for o in out)
    accepted = sum(o.get("timings", {}).get("accepted_tokens", 0) for o in out)
    return tokens / seconds, [o["choices"][0]["text"] for o in out], drafted, accepted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--octet", default=os.path.join(ROOT, "build/default/bin/octet"))
    ap.add_argument("--model", default=os.path.join(ROOT, "resources/models/nanochat-demo"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-tokens", type=int, default=4)
    a = ap.parse_args()
    prompts = [(s * 2 + tail) for s, tail in
               (SENTENCES[i % len(SENTENCES)] for i in range(a.slots))]
    spec = ["--speculative", "ngram", "--draft-tokens", str(a.draft_tokens), "--draft-length"]
    configs = {"plain": [], "fixed": spec + ["fixed"], "auto": spec + ["auto"]}
    servers = {}
    try:
        for name, extra in configs.items():
            servers[name] = start(a.octet, a.model, a.slots, a.threads, extra)
        tps = {name: [] for name in configs}
        last = {}
        names = list(servers)
        for r in range(a.rounds):
            # A different server first each round: none always follows another.
            for name in names[r % len(names):] + names[:r % len(names)]:
                port = servers[name][1]
                rate, texts, drafted, accepted = one_round(port, prompts, a.max_tokens)
                tps[name].append(rate)
                last[name] = (texts, drafted, accepted)
            for name in names:
                if name != "plain" and last[name][0] != last["plain"][0]:
                    sys.exit(f"serve_speculative: the {name} server's replies differ from plain "
                             "serving's")
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    base = statistics.median(tps["plain"])
    doc = {"model": a.model, "slots": a.slots, "threads": a.threads, "rounds": a.rounds,
           "max_tokens": a.max_tokens, "draft_tokens": a.draft_tokens, "servers": {}}
    print(f"{'server':8s} {'aggregate tok/s':>16s} {'vs plain':>9s} {'drafted':>8s} "
          f"{'accepted':>9s}  (last round)", file=sys.stderr)
    for name in configs:
        med = statistics.median(tps[name])
        _, drafted, accepted = last[name]
        print(f"{name:8s} {med:16.1f} {med / base:8.2f}x {drafted:8d} {accepted:9d}",
              file=sys.stderr)
        doc["servers"][name] = {"aggregate_tps": med, "vs_plain": med / base,
                                "rounds_tps": tps[name], "drafted_last_round": drafted,
                                "accepted_last_round": accepted, "identical_output": True}
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
