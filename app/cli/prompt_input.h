// Turning what a user typed into prompt ids, shared by `octet generate` and
// `octet chat`: raw ids, plain text (tokenized with the model's tokenizer.json,
// special tokens added as the tokenizer's post-processor says), or a chat
// conversation rendered with the model's chat template.
#pragma once

#include <string>
#include <vector>

#include "octet/base/status.h"
#include "octet/engine/chat_template.h"
#include "octet/engine/tokenizer.h"

namespace octet::cli {

// Loads `model_dir`'s tokenizer, with an error that says which file is missing.
Result<engine::Tokenizer> LoadModelTokenizer(const std::string& model_dir);

// Renders `messages` with the tokenizer's chat template (generation prompt
// appended) and encodes the text; the template writes its own BOS. Prints the
// template's warning (an unrecognised template) once to stderr.
Result<std::vector<int32_t>> EncodeChat(const engine::Tokenizer& tok,
                                        const std::vector<engine::ChatMessage>& messages,
                                        bool enable_thinking);

// Checks every id against the model's vocabulary; the error names the position.
Status CheckIdsInVocab(const std::vector<int32_t>& ids, int64_t vocab_size);

}  // namespace octet::cli
