#!/usr/bin/env python3
"""Regenerates chat_template_references.json (needs python3-jinja2).

Renders chat templates the way transformers.apply_chat_template does, to give
tests/unit/engine_text/test_chat_template.cpp an independent reference. Not run
by the tests.

  python3 render_chat_references.py FIXTURES_DIR > chat_template_references.json
"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def render(template, messages, add_generation_prompt, kwargs, special):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            tools=None, documents=None, **special, **kwargs)


def main():
    fixtures = sys.argv[1] if len(sys.argv) > 1 else "../../../../../shared/fixtures"
    current = json.load(open(__file__.replace("render_chat_references.py", "chat_template_references.json")))
    doc = {"note": current["note"], "fixture_templates": [], "other_templates": []}
    for case in current["fixture_templates"]:
        cfg = json.load(open(f"{fixtures}/tokenizers/{case['tokenizer']}/tokenizer_config.json"))
        special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token") if cfg.get(k)}
        case["text"] = render(cfg["chat_template"], case["messages"], case["add_generation_prompt"],
                              case["template_kwargs"], special)
        doc["fixture_templates"].append(case)
    for case in current["other_templates"]:
        special = {"bos_token": case["bos_token"]} if case["bos_token"] else {}
        case["text"] = render(case["template"], case["messages"], case["add_generation_prompt"],
                              case["template_kwargs"], special)
        doc["other_templates"].append(case)
    print(json.dumps(doc, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
