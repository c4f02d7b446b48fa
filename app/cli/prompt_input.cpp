#include "prompt_input.h"

#include <iostream>

#include "octet/base/file_util.h"
#include "octet/engine/model_config.h"

namespace octet::cli {

Result<engine::Tokenizer> LoadModelTokenizer(const std::string& model_dir) {
  // The folder itself first: a mistyped path is not a missing tokenizer.
  OCTET_RETURN_IF_ERROR(engine::CheckModelFolder(model_dir));
  if (!PathExists(JoinPath(model_dir, "tokenizer.json"))) {
    return NotFoundError("'" + model_dir +
                         "' has no tokenizer.json: give the prompt as ids with --prompt-ids, or "
                         "copy the model's tokenizer.json (and tokenizer_config.json) there");
  }
  return engine::Tokenizer::Load(model_dir);
}

Result<std::vector<int32_t>> EncodeChat(const engine::Tokenizer& tok,
                                        const std::vector<engine::ChatMessage>& messages,
                                        bool enable_thinking) {
  const engine::ChatTemplate& tmpl = tok.chat_template();
  static bool warned = false;
  if (!tmpl.warning().empty() && !warned) {
    std::cerr << "warning: " << tmpl.warning() << "\n";
    warned = true;
  }
  engine::ChatOptions opts;
  opts.add_generation_prompt = true;
  opts.enable_thinking = enable_thinking;
  OCTET_ASSIGN_OR_RETURN(std::string text, tmpl.Apply(messages, opts));
  engine::EncodeOptions eo;
  eo.add_special_tokens = false;  // the template writes BOS itself where the family has one
  std::vector<engine::TokenId> ids = tok.Encode(text, eo);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

Status CheckIdsInVocab(const std::vector<int32_t>& ids, int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return OutOfRangeError("token id " + std::to_string(ids[i]) + " at position " +
                             std::to_string(i) + " is out of range (model vocab size " +
                             std::to_string(vocab_size) +
                             "): does the tokenizer belong to this model?");
    }
  }
  return Status::Ok();
}

}  // namespace octet::cli
