// octet_demo_model DIR [TOKENIZER_DIR]: writes the small random Qwen3-shaped
// checkpoint the workbench tests use, with the real Qwen3 tokenizer, for the
// screenshot script (tests/ui/screenshots.sh) to launch and chat with. Its
// replies are random text: it shows the machinery, not a model.
#include <cstdio>
#include <string>

#include "octet_test.h"
#include "workbench_test_util.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: octet_demo_model DIR\n(the fixtures come from $OCTET_FIXTURES_DIR)\n");
    return 2;
  }
  if (!octet::test::FixturesPresent()) {
    std::fprintf(stderr, "octet_demo_model: fixtures not found (set OCTET_FIXTURES_DIR)\n");
    return 1;
  }
  const octet::Status s = octet::test::WriteChatModel(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "octet_demo_model: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
