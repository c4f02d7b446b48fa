// The OpenAI request fields and reply pieces of `octet serve`
// (openai_request.h): the field readers the handlers and
// ParseOpenAiRequestBody share, errors as OpenAI's error objects, logprobs,
// usage and timings as the replies carry them. The server is openai_server.cpp.
#include "openai_request.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "octet/base/json.h"
#include "octet/engine/tokenizer.h"

namespace octet::engine {
namespace openai {

// ---- errors -----------------------------------------------------------------------

json ErrorBody(const HttpError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

HttpError FromStatus(const Status& s) {
  HttpError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
      e.status = 400;
      break;
    case StatusCode::kOutOfRange:
      e.status = 400;
      e.code = "context_length_exceeded";
      e.param = "messages";
      break;
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

// ---- request fields ----------------------------------------------------------------

// Reads the fields every generation request shares into `r`.
std::optional<HttpError> ParseCommon(const json& j, CompletionRequest* r, bool* stream,
                                     bool* include_usage, bool* return_ids) {
  auto bad = [](std::string param, std::string message) {
    HttpError e;
    e.param = std::move(param);
    e.message = std::move(message);
    return e;
  };
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) return bad(key, std::string(key) + " must be an integer");
    const int64_t v = it->get<int64_t>();
    if (v < 1) {
      return bad(key, std::string(key) + " must be at least 1 (got " + std::to_string(v) + ")");
    }
    r->max_tokens = v;
  }
  if (auto it = j.find("temperature"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) return bad("temperature", "temperature must be a number");
    const double t = it->get<double>();
    if (t < 0) return bad("temperature", "temperature must be >= 0");
    r->sampling.temperature = static_cast<float>(t);
  } else {
    r->sampling.temperature = 1.0f;  // OpenAI's default
  }
  if (auto it = j.find("top_p"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) return bad("top_p", "top_p must be a number");
    const double p = it->get<double>();
    if (!(p > 0 && p <= 1)) return bad("top_p", "top_p must be in (0, 1]");
    r->sampling.top_p = static_cast<float>(p);
  }
  if (auto it = j.find("top_k"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("top_k", "top_k must be an integer");
    const int64_t k = it->get<int64_t>();
    if (k < -1) return bad("top_k", "top_k must be >= 0 (or -1: no limit)");
    r->sampling.top_k = k < 0 ? 0 : k;
  }
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "seed must be an integer");
    r->sampling.seed = static_cast<uint64_t>(it->get<int64_t>());
  } else {
    static std::atomic<uint64_t> counter{0};
    r->sampling.seed = std::random_device{}() ^ (counter++ << 32);
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r->stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) return bad("stop", "stop must be a string or an array of strings");
        r->stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("stop", "stop must be a string or an array of strings");
    }
    if (r->stop.size() > 16) return bad("stop", "at most 16 stop strings");
  }
  if (auto it = j.find("n"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > kMaxSequencesPerRequest) {
      return bad("n", "n must be an integer from 1 to " + std::to_string(kMaxSequencesPerRequest));
    }
    r->n = static_cast<int>(it->get<int64_t>());
  }
  for (const char* key : {"echo", "best_of"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    if (std::string(key) == "best_of" && it->is_number_integer() && it->get<int64_t>() == 1) {
      continue;
    }
    return bad(key, std::string(key) + " is not supported by this server");
  }
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("stream", "stream must be a boolean");
    *stream = it->get<bool>();
  }
  if (auto it = j.find("stream_options"); it != j.end() && it->is_object()) {
    auto u = it->find("include_usage");
    if (u != it->end() && !u->is_null() && !u->is_boolean()) {
      return bad("stream_options", "stream_options.include_usage must be a boolean");
    }
    *include_usage = u != it->end() && u->is_boolean() && u->get<bool>();
  }
  if (auto it = j.find("ignore_eos"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("ignore_eos", "ignore_eos must be a boolean");
    r->ignore_eos = it->get<bool>();
  }
  if (auto it = j.find("min_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return bad("min_tokens", "min_tokens must be an integer >= 0");
    }
    r->min_tokens = it->get<int64_t>();
  }
  if (auto it = j.find("return_token_ids"); it != j.end() && it->is_boolean()) {
    *return_ids = it->get<bool>();
  }
  return std::nullopt;
}

std::optional<HttpError> ParseLogprobs(const json& j, bool chat, CompletionRequest* r) {
  auto bad = [](std::string param, std::string message) {
    HttpError e;
    e.param = std::move(param);
    e.message = std::move(message);
    return e;
  };
  const std::string range = "0 to " + std::to_string(kMaxTopLogprobs);
  auto lp = j.find("logprobs");
  const bool has_lp = lp != j.end() && !lp->is_null();
  if (chat) {
    if (has_lp && !lp->is_boolean()) return bad("logprobs", "logprobs must be a boolean");
    const bool on = has_lp && lp->get<bool>();
    auto top = j.find("top_logprobs");
    int k = 0;
    if (top != j.end() && !top->is_null()) {
      if (!top->is_number_integer() || top->get<int64_t>() < 0 ||
          top->get<int64_t>() > kMaxTopLogprobs) {
        return bad("top_logprobs", "top_logprobs must be an integer from " + range);
      }
      k = static_cast<int>(top->get<int64_t>());
      if (!on) return bad("top_logprobs", "top_logprobs needs \"logprobs\": true");
    }
    r->logprobs = on ? k : -1;
    return std::nullopt;
  }
  if (!has_lp) return std::nullopt;
  if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > kMaxTopLogprobs) {
    return bad("logprobs", "logprobs must be an integer from " + range +
                               " (alternatives per token) on /v1/completions");
  }
  r->logprobs = static_cast<int>(lp->get<int64_t>());
  return std::nullopt;
}

namespace {

// A token as text for logprobs: its bytes, with invalid UTF-8 (a piece of a
// multi-byte character) replaced by U+FFFD; "token_id:N" without a tokenizer.
std::string TokenText(const Tokenizer* tok, int32_t id, std::string* raw) {
  if (!tok) {
    *raw = "token_id:" + std::to_string(id);
    return *raw;
  }
  *raw = tok->TokenBytes(id);
  std::string out;
  const std::string& b = *raw;
  for (size_t i = 0; i < b.size();) {
    const auto c = static_cast<uint8_t>(b[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= b.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<uint8_t>(b[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(b, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      i += 1;
    }
  }
  return out;
}

json Bytes(const std::string& raw) {
  json a = json::array();
  for (char c : raw) a.push_back(static_cast<int>(static_cast<uint8_t>(c)));
  return a;
}

}  // namespace

json ChatLogprobs(const Tokenizer* tok, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    std::string raw;
    json e = {{"token", TokenText(tok, t.id, &raw)}, {"logprob", t.logprob}};
    e["bytes"] = Bytes(raw);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      std::string r2;
      json a = {{"token", TokenText(tok, id, &r2)}, {"logprob", lp}};
      a["bytes"] = Bytes(r2);
      top.push_back(std::move(a));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json CompletionLogprobs(const Tokenizer* tok, const std::vector<TokenLogprob>& lps,
                        int64_t* offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  for (const TokenLogprob& t : lps) {
    std::string raw;
    const std::string text = TokenText(tok, t.id, &raw);
    tokens.push_back(text);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) {
      std::string r2;
      const std::string k = TokenText(tok, id, &r2);
      if (!top.contains(k)) top[k] = lp;
    }
    tops.push_back(std::move(top));
    offsets.push_back(*offset);
    *offset += static_cast<int64_t>(text.size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

std::optional<HttpError> ApplyGenerationDefaults(const json& j, const GenerationDefaults& d,
                                                 CompletionRequest* r) {
  auto absent = [&](const char* key) { return !j.contains(key) || j[key].is_null(); };
  if (!absent("repetition_penalty")) {
    const json& v = j["repetition_penalty"];
    if (!v.is_number() || !(v.get<double>() > 0)) {
      HttpError e;
      e.param = "repetition_penalty";
      e.message = "repetition_penalty must be a number > 0";
      return e;
    }
    r->sampling.repetition_penalty = static_cast<float>(v.get<double>());
  } else if (d.repetition_penalty) {
    r->sampling.repetition_penalty = *d.repetition_penalty;
  }
  if (absent("temperature") && d.temperature) r->sampling.temperature = *d.temperature;
  if (absent("top_p") && d.top_p) r->sampling.top_p = *d.top_p;
  if (absent("top_k") && d.top_k) r->sampling.top_k = *d.top_k;
  return std::nullopt;
}

std::optional<HttpError> ParseMessages(const json& j, CompletionRequest* r) {
  HttpError e;
  e.param = "messages";
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array() || it->empty()) {
    e.message = "'messages' must be a non-empty array";
    return e;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      e.message = where + " must be an object with a string 'role'";
      return e;
    }
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    const json content = m.value("content", json(nullptr));
    if (content.is_string()) {
      msg.content = content.get<std::string>();
    } else if (content.is_array()) {
      for (const json& part : content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
          e.message = where + ".content: only text parts are supported";
          return e;
        }
        msg.content += part["text"].get<std::string>();
      }
    } else if (!content.is_null()) {
      e.message = where + ".content must be a string or an array of text parts";
      return e;
    } else {
      msg.content_null = m.contains("content");  // null, not absent
    }
    r->messages.push_back(std::move(msg));
  }
  r->chat = true;
  if (auto k = j.find("chat_template_kwargs"); k != j.end() && k->is_object()) {
    if (auto t = k->find("enable_thinking"); t != k->end() && t->is_boolean()) {
      r->enable_thinking = t->get<bool>();
    }
    if (auto t = k->find("tools_in_user_message"); t != k->end() && t->is_boolean()) {
      r->tools_in_user_message = t->get<bool>();
    }
  }
  return std::nullopt;
}

std::optional<HttpError> ParsePrompt(const json& j, CompletionRequest* r) {
  HttpError e;
  e.param = "prompt";
  auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) {
    e.message = "'prompt' is required";
    return e;
  }
  json p = *it;
  // A batch of one prompt is accepted as that prompt.
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    r->prompt = p.get<std::string>();
    return std::nullopt;
  }
  if (p.is_array()) {
    if (p.empty()) {
      e.message = "'prompt' must not be empty";
      return e;
    }
    for (const json& v : p) {
      if (!v.is_number_integer()) {
        e.message = "'prompt' must be a string or an array of token ids (one prompt per request)";
        return e;
      }
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id > INT32_MAX) {
        e.message = "token id " + std::to_string(id) + " is out of range";
        return e;
      }
      r->prompt_ids.push_back(static_cast<int32_t>(id));
    }
    r->has_prompt_ids = true;
    return std::nullopt;
  }
  e.message = "'prompt' must be a string or an array of token ids";
  return e;
}

json Usage(const std::vector<CompletionDelta>& finals) {
  const int64_t prompt = finals.empty() ? 0 : finals.front().prompt_tokens;
  int64_t completion = 0;
  for (const CompletionDelta& d : finals) completion += d.completion_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json Timings(const CompletionDelta& d) {
  const RequestTiming& t = d.timing;
  const double total_ms = t.last_token_ns > 0 ? (t.last_token_ns - t.submitted_ns) * 1e-6 : 0.0;
  json j = {{"queue_ms", t.queue_ms()},
            {"ttft_ms", t.ttft_ms()},
            {"prefill_tps", t.prefill_tps(d.prompt_tokens)},
            {"decode_tps", t.decode_tps(d.completion_tokens)},
            {"total_ms", total_ms}};
  if (t.speculative) {
    // Speculative decoding: tokens drafted for this request and kept.
    j["drafted_tokens"] = t.drafted_tokens;
    j["accepted_tokens"] = t.accepted_tokens;
    j["acceptance_rate"] = t.acceptance_rate();
  }
  return j;
}

std::string FinishReason(const std::string& r) {
  // OpenAI knows "stop" and "length"; a cancelled request never reaches a client.
  return r == "length" ? "length" : "stop";
}

}  // namespace openai

OpenAiRequestParse ParseOpenAiRequestBody(std::string_view body, bool chat) {
  using namespace openai;
  OpenAiRequestParse out;
  auto fail = [&out](const HttpError& e) {
    out.status = e.status;
    out.message = e.message;
    out.param = e.param;
    return out;
  };
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail({400, "the request body is not valid JSON"});
  if (!j.is_object()) return fail({400, "the request body must be a JSON object"});
  CompletionRequest& r = out.request;
  if (auto e = ParseCommon(j, &r, &out.stream, &out.include_usage, &out.return_ids))
    return fail(*e);
  if (auto e = chat ? ParseMessages(j, &r) : ParsePrompt(j, &r)) return fail(*e);
  if (auto e = ParseLogprobs(j, chat, &r)) return fail(*e);
  out.ok = true;
  return out;
}

}  // namespace octet::engine
