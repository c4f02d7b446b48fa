#!/usr/bin/env python3
"""Drives `octet serve` with the official OpenAI Python client: logprobs
(chat and completions, streamed and not), n > 1 and the request bounds.

  openai_client_check.py BASE_URL PROMPT_IDS OUT.json

Checks what needs no reference here (shapes, bounds, n streams, seeds) and
writes one JSON document (OUT.json) with what the C++ driver compares against the
engine's own logits (`octet generate --logits-out`). Exit 77 (skip) only when
the `openai` package cannot be imported; any failed check exits 1.
"""
import json
import sys

from openai_harness import check, make_client
import openai

base_url, prompt_ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
client = make_client(base_url)
model = client.models.list().data[0].id
out = {"openai_version": openai.__version__}


# ---- completions, logprobs=5, greedy: non-streamed and streamed agree ----
c = client.completions.create(model=model, prompt=prompt_ids, max_tokens=6, temperature=0,
                              logprobs=5, extra_body={"ignore_eos": True, "return_token_ids": True})
ch = c.choices[0]
lp = ch.logprobs
check(len(lp.tokens) == 6 and len(lp.token_logprobs) == 6, "completions: 6 tokens with logprobs")
check(len(lp.top_logprobs) == 6 and all(1 <= len(t) <= 5 for t in lp.top_logprobs),
      "completions: top_logprobs dicts of up to 5")
check(lp.text_offset[0] == 0 and all(a <= b for a, b in zip(lp.text_offset, lp.text_offset[1:])),
      "completions: text_offset ascending from 0")
check(all(x <= 0 for x in lp.token_logprobs), "completions: logprobs <= 0")
for t, top in zip(lp.token_logprobs, lp.top_logprobs):
    check(abs(max(top.values()) - t) < 1e-6, "greedy: the token is the most likely alternative")
ids = ch.model_extra.get("token_ids") if ch.model_extra else None
check(ids is not None and len(ids) == 6, "return_token_ids gives the 6 ids")
out["completion"] = {"token_ids": ids, "token_logprobs": lp.token_logprobs}

streamed_lps, streamed_tokens = [], []
for chunk in client.completions.create(model=model, prompt=prompt_ids, max_tokens=6,
                                       temperature=0, logprobs=2, stream=True,
                                       extra_body={"ignore_eos": True}):
    for sc in chunk.choices:
        if sc.logprobs is not None:
            streamed_lps += sc.logprobs.token_logprobs
            streamed_tokens += sc.logprobs.tokens
check(len(streamed_lps) == 6, "streamed completions: 6 logprobs")
check(all(abs(a - b) < 1e-6 for a, b in zip(streamed_lps, lp.token_logprobs)),
      "streamed and non-streamed logprobs agree")
check(streamed_tokens == lp.tokens, "streamed and non-streamed tokens agree")

# ---- chat: logprobs + top_logprobs, non-streamed and streamed ----
msgs = [{"role": "user", "content": "Say something."}]
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=5, temperature=0,
                                   logprobs=True, top_logprobs=3,
                                   extra_body={"ignore_eos": True})
content = r.choices[0].logprobs.content
check(len(content) == r.usage.completion_tokens == 5, "chat: one logprob entry per token")
for e in content:
    check(isinstance(e.token, str) and e.logprob <= 0, "chat: token and logprob")
    check(isinstance(e.bytes, list) and all(0 <= b < 256 for b in e.bytes), "chat: bytes")
    check(len(e.top_logprobs) == 3, "chat: 3 alternatives")
    check(abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, "chat greedy: top-1 is the token")
out["chat_logprobs"] = [e.logprob for e in content]
stream_entries = []
for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=5,
                                            temperature=0, logprobs=True, top_logprobs=1,
                                            stream=True, extra_body={"ignore_eos": True}):
    for sc in chunk.choices:
        if sc.logprobs is not None and sc.logprobs.content:
            stream_entries += sc.logprobs.content
check([round(e.logprob, 5) for e in stream_entries] == [round(x, 5) for x in out["chat_logprobs"]],
      "chat: streamed logprobs equal the non-streamed ones")
r = client.chat.completions.create(model=model, messages=msgs, max_tokens=3)
check(r.choices[0].logprobs is None, "chat without logprobs: null")

# ---- n = 2 ----
def two(seed, temperature=1.0):
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, n=2,
                                       temperature=temperature, seed=seed,
                                       extra_body={"ignore_eos": True})
    check(len(r.choices) == 2 and sorted(c.index for c in r.choices) == [0, 1], "n=2: indices")
    check(r.usage.completion_tokens == 24, "n=2: completion tokens of both choices")
    return r, [c.message.content for c in sorted(r.choices, key=lambda c: c.index)]

r, a = two(5)
_, b = two(5)
check(a[0] != a[1], "n=2 sampled: distinct choices")
check(a == b, "n=2: the same seed gives the same choices")
one = client.chat.completions.create(model=model, messages=msgs, max_tokens=12,
                                     temperature=1.0, seed=5, extra_body={"ignore_eos": True})
check(one.usage.prompt_tokens == r.usage.prompt_tokens, "n=2: the prompt counts once")
check(one.choices[0].message.content == a[0], "n=2: choice 0 is the single request's seed")
_, g = two(9, temperature=0)
check(g[0] == g[1], "n=2 at temperature 0: identical choices")
texts = {0: "", 1: ""}
order = []
for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=12, n=2,
                                            temperature=1.0, seed=5, stream=True,
                                            extra_body={"ignore_eos": True}):
    for sc in chunk.choices:
        texts[sc.index] += sc.delta.content or ""
        order.append(sc.index)
check([texts[0], texts[1]] == a, "n=2 streamed: the same choices, by index")
check(set(order) == {0, 1}, "n=2 streamed: chunks of both indices")
out["n2"] = a

# ---- bounds: a 400 with the parameter named ----
for kwargs, param in [({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                      ({"n": 17}, "n"), ({"top_logprobs": 2}, "top_logprobs")]:
    try:
        client.chat.completions.create(model=model, messages=msgs, max_tokens=2, **kwargs)
        check(False, f"{kwargs}: accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"{kwargs}: 400")
        check(param in str(e), f"{kwargs}: the error names {param}: {e}")
try:
    client.completions.create(model=model, prompt=prompt_ids, max_tokens=2, logprobs=21)
    check(False, "completions logprobs=21 accepted")
except openai.BadRequestError as e:
    check(e.status_code == 400, "completions logprobs=21: 400")

# ---- generation_config.json (do_sample false): a request without
# temperature is greedy whatever its seed ----
d1 = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, seed=1,
                                    extra_body={"ignore_eos": True}).choices[0].message.content
d2 = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, seed=2,
                                    extra_body={"ignore_eos": True}).choices[0].message.content
gr = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0,
                                    extra_body={"ignore_eos": True}).choices[0].message.content
check(d1 == d2 == gr, "default requests follow generation_config.json's do_sample: false")

with open(sys.argv[3], "w") as f:
    json.dump(out, f)
