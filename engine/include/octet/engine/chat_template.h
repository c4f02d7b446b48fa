// A ChatTemplate renders a conversation into the text a chat model was trained
// on, the way `transformers.apply_chat_template` renders the Jinja
// `chat_template` of tokenizer_config.json — without a Jinja engine: the
// template text is recognised as one of the known families and that family's
// format is written by plain code.
//
//   kQwen3   ChatML with thinking blocks (Qwen3): <|im_start|>role\n...<|im_end|>\n;
//            enable_thinking=false appends an empty <think>\n\n</think>\n\n to the
//            generation prompt; <think>...</think> is stripped from assistant
//            turns before the last user query.
//   kChatML  plain ChatML (Qwen2, Qwen2.5, many fine-tunes); a default system
//            prompt written in the template is inserted when the conversation
//            has none.
//   kLlama3  <|start_header_id|>role<|end_header_id|>\n\n + trimmed content +
//            <|eot_id|>, after bos_token (Meta-Llama-3-Instruct's template; it
//            always appends the assistant header; it has no tools section:
//            tool definitions and assistant tool_calls are not written, `tool`
//            and `ipython` turns are headers of that role). Templates of Llama 3.1 and
//            later (recognised by their "Cutting Knowledge Date" line) always
//            open with a system block carrying that line and "Today Date: ...",
//            and honour add_generation_prompt. Those with a tools section
//            (3.1, 3.2, 3.3 Instruct) write the tool definitions (into the
//            first user turn by default), one assistant tool call per turn as
//            {"name": ..., "parameters": ...}, and tool results as ipython
//            turns.
//   kPlain   "role: content" paragraphs, after bos_token when the tokenizer
//            names one (a base model such as nanochat's saw every document
//            start with it): the fallback for a missing or unrecognised
//            template (warning() says so; nothing is guessed silently).
//
// The result is text: encode it with Tokenizer::Encode (add_special_tokens
// false: templates that want a BOS write it themselves), whose added-token
// pass turns the written special tokens (<|im_start|>, ...) into their ids. It
// is what Python's apply_chat_template(..., tokenize=False) gives for the same
// messages (checked against ../shared/fixtures/tokenizers/chat_cases.json).
// As in Python, special tokens typed inside a message's content are not
// escaped: they become special ids when the text is encoded.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::engine {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  // Assistant turns: the OpenAI "tool_calls" array as JSON text (empty: none);
  // each {"function": {"name": ..., "arguments": string or object}}.
  std::string tool_calls_json;
  // "content": null (an assistant turn that only calls tools), as opposed to
  // empty or absent: the original Llama-3 template prints it as Jinja prints
  // Python's None ("None"); the other families write it as empty.
  bool content_null = false;
};

struct ChatOptions {
  // Append the header that makes the model answer as the assistant.
  bool add_generation_prompt = true;
  // Qwen3: false writes the empty think block (no reasoning); unset or true
  // lets the model think. Ignored by the other families.
  std::optional<bool> enable_thinking;
  // Llama 3.1+: the "Today Date:" text. Empty: what the template itself uses
  // (today as "26 Jul 2024"-style when it calls strftime_now, else "26 Jul 2024").
  std::string date_string;
  // The OpenAI "tools" array as JSON text (empty: no tools). Qwen3 writes them
  // into its system turn (the template's "# Tools" section, each tool through
  // `tojson`); see RendersTools().
  std::string tools_json;
  // Llama 3.1+ (the template's `tools_in_user_message`): the tool definitions
  // go into the first user turn (unset or true, the template's default) or
  // into the system block (false).
  std::optional<bool> tools_in_user_message;
};

enum class ChatFamily { kQwen3, kChatML, kLlama3, kPlain };

class ChatTemplate {
 public:
  // Recognises `template_text` (tokenizer_config.json "chat_template").
  // `bos_token` is what the Llama-3 and plain templates write first. An empty or
  // unrecognised template gives kPlain with warning() set.
  static ChatTemplate Detect(std::string_view template_text, std::string_view bos_token = {});
  // A template of `family` with that family's usual settings (no default
  // system prompt; Llama-3 with `bos_token`).
  static ChatTemplate ForFamily(ChatFamily family, std::string_view bos_token = {});

  ChatFamily family() const { return family_; }
  // "qwen3", "chatml", "llama3", "plain".
  std::string_view family_name() const;
  // Why the plain fallback was chosen; empty when the template was recognised.
  const std::string& warning() const { return warning_; }
  // ChatML: the system prompt the template inserts when there is none.
  const std::string& default_system_prompt() const { return default_system_; }

  // Whether Apply writes ChatOptions::tools_json and assistant tool calls the
  // way the template does (Qwen3; Llama 3.1 and later). Templates without a
  // tools section (the original Llama-3 one) would drop them: callers refuse
  // tools there.
  bool RendersTools() const { return family_ == ChatFamily::kQwen3 || llama_tools_; }

  // The text to encode. Errors: no messages, a message with an empty role, or
  // tools / tool calls that are not a JSON array.
  Result<std::string> Apply(std::span<const ChatMessage> messages,
                            const ChatOptions& options = {}) const;

  // Contents of the tokens that end an assistant turn in this family, to be
  // mapped to ids by the tokenizer: {"<|im_end|>", "<|endoftext|>"} for ChatML,
  // {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"} for Llama-3, {} for plain.
  std::vector<std::string> StopTokens() const;

 private:
  std::string ApplyChatML(std::span<const ChatMessage> messages, const ChatOptions& options) const;
  Result<std::string> ApplyLlama3(std::span<const ChatMessage> messages,
                                  const ChatOptions& options) const;

  ChatFamily family_ = ChatFamily::kPlain;
  std::string warning_;
  std::string default_system_;
  std::string bos_token_;
  bool tool_response_ = false;   // ChatML: tool turns as <tool_response> inside a user turn
  bool llama31_ = false;         // Llama 3.1+: system block with the knowledge/today dates
  bool llama_date_now_ = false;  // Llama 3.2+: the template asks for today's date
  bool llama_tools_ = false;     // Llama 3.1+ with its tools section (tools_in_user_message)
};

std::string_view ChatFamilyName(ChatFamily family);

}  // namespace octet::engine
