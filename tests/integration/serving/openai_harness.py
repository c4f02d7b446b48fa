"""What the openai-client scripts beside this file share: the import of the
official `openai` package, exiting 77 (the test runner's skip code) when it
cannot be imported, since then the premise of those tests is absent; a client
for a server's base URL; and check(), which exits 1 with a message on the
first failed check."""
import sys

try:
    import openai
except ImportError as e:
    print(f"cannot import openai ({e})", file=sys.stderr)
    sys.exit(77)


def make_client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", timeout=120, max_retries=0)


def check(cond, what):
    if not cond:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)
