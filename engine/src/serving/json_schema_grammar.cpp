// JSON schema -> character-level pushdown automaton (structured_output.h).
#include <algorithm>
#include <map>
#include <set>

#include "json_grammar_impl.h"
#include "octet/base/json.h"

namespace octet::engine {

// Keys in their written order: properties are generated in schema order.
using json = nlohmann::ordered_json;

namespace {

// ---- compiler -----------------------------------------------------------------------

// JSON pointer escaping of one reference token.
std::string PointerToken(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  Result<std::shared_ptr<const JsonGrammar>> Run() {
    auto g = std::make_shared<JsonGrammar>();
    g_ = g.get();
    AddBuiltins();
    if (!root_.is_object() && !root_.is_boolean()) {
      return InvalidArgumentError("the schema must be a JSON object");
    }
    OCTET_ASSIGN_OR_RETURN(uint32_t r, Node(root_, ""));
    g->root = r;
    return std::shared_ptr<const JsonGrammar>(std::move(g));
  }

  void AddBuiltins() {
    auto add = [&](GrammarNode n) {
      g_->nodes.push_back(std::move(n));
      return static_cast<uint32_t>(g_->nodes.size() - 1);
    };
    g_->any = add(GrammarNode{});
    GrammarNode obj;
    obj.kind = NodeKind::kObject;
    obj.additional = g_->any;
    g_->any_object = add(obj);
    GrammarNode arr;
    arr.kind = NodeKind::kArray;
    arr.items = g_->any;
    g_->any_array = add(arr);
    GrammarNode num;
    num.kind = NodeKind::kNumber;
    g_->number = add(num);
    GrammarNode tfn;
    tfn.kind = NodeKind::kLiterals;
    tfn.literals = {"true", "false", "null"};
    g_->tfn = add(tfn);
  }

  uint32_t Add(GrammarNode n) {
    g_->nodes.push_back(std::move(n));
    return static_cast<uint32_t>(g_->nodes.size() - 1);
  }

  static Status Bad(const std::string& where, const std::string& what) {
    return InvalidArgumentError((where.empty() ? std::string("/") : where) + ": " + what);
  }

  Result<uint32_t> Node(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad(where, "the schema 'false' matches nothing");
      return g_->any;
    }
    if (!s.is_object()) return Bad(where, "a schema must be an object or a boolean");
    static const std::set<std::string> kAnnotations = {
        "title", "description", "default", "examples", "$schema",
        "$id",   "$comment",    "strict",  "$defs",    "definitions"};
    static const std::set<std::string> kKnown = {
        "type",  "properties", "required", "additionalProperties",
        "items", "minItems",   "maxItems", "enum",
        "const", "anyOf",      "oneOf",    "$ref"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key()) || kKnown.count(it.key())) continue;
      return Bad(where + "/" + PointerToken(it.key()),
                 "keyword '" + it.key() + "' is not supported");
    }
    if (auto r = s.find("$ref"); r != s.end()) {
      if (s.size() > 1) {
        for (auto it = s.begin(); it != s.end(); ++it) {
          if (it.key() != "$ref" && !kAnnotations.count(it.key())) {
            return Bad(where + "/" + PointerToken(it.key()),
                       "keywords beside $ref are not supported");
          }
        }
      }
      return Ref(*r, where + "/$ref");
    }
    if (auto c = s.find("const"); c != s.end()) {
      GrammarNode n;
      n.kind = NodeKind::kLiterals;
      n.literals.push_back(c->dump());
      return Add(std::move(n));
    }
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty())
        return Bad(where + "/enum", "enum must be a non-empty array");
      GrammarNode n;
      n.kind = NodeKind::kLiterals;
      for (const json& v : *e) n.literals.push_back(v.dump());
      return Add(std::move(n));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto a = s.find(key);
      if (a == s.end()) continue;
      if (!a->is_array() || a->empty()) {
        return Bad(where + "/" + key, std::string(key) + " must be a non-empty array");
      }
      GrammarNode n;
      n.kind = NodeKind::kAnyOf;
      const uint32_t id = Add(n);
      std::vector<uint32_t> alts;
      for (size_t i = 0; i < a->size(); ++i) {
        OCTET_ASSIGN_OR_RETURN(uint32_t alt,
                               Node((*a)[i], where + "/" + key + "/" + std::to_string(i)));
        alts.push_back(alt);
      }
      g_->nodes[id].alts = std::move(alts);
      return id;
    }
    auto t = s.find("type");
    if (t == s.end()) {
      // No type: objects/arrays keywords imply their type; otherwise anything.
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties")) {
        return Typed(s, "object", where);
      }
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
        return Typed(s, "array", where);
      }
      return g_->any;
    }
    if (t->is_string()) return Typed(s, t->get<std::string>(), where);
    if (t->is_array() && !t->empty()) {
      GrammarNode n;
      n.kind = NodeKind::kAnyOf;
      const uint32_t id = Add(n);
      std::vector<uint32_t> alts;
      for (size_t i = 0; i < t->size(); ++i) {
        if (!(*t)[i].is_string())
          return Bad(where + "/type/" + std::to_string(i), "must be a string");
        OCTET_ASSIGN_OR_RETURN(uint32_t alt, Typed(s, (*t)[i].get<std::string>(),
                                                   where + "/type/" + std::to_string(i)));
        alts.push_back(alt);
      }
      g_->nodes[id].alts = std::move(alts);
      return id;
    }
    return Bad(where + "/type", "type must be a string or a non-empty array of strings");
  }

  Result<uint32_t> Typed(const json& s, const std::string& type, const std::string& where) {
    GrammarNode n;
    if (type == "string") {
      n.kind = NodeKind::kString;
      return Add(std::move(n));
    }
    if (type == "number") {
      n.kind = NodeKind::kNumber;
      return Add(std::move(n));
    }
    if (type == "integer") {
      n.kind = NodeKind::kInteger;
      return Add(std::move(n));
    }
    if (type == "boolean") {
      n.kind = NodeKind::kLiterals;
      n.literals = {"true", "false"};
      return Add(std::move(n));
    }
    if (type == "null") {
      n.kind = NodeKind::kLiterals;
      n.literals = {"null"};
      return Add(std::move(n));
    }
    if (type == "array") {
      n.kind = NodeKind::kArray;
      const uint32_t id = Add(n);
      uint32_t items = g_->any;
      if (auto it = s.find("items"); it != s.end()) {
        OCTET_ASSIGN_OR_RETURN(items, Node(*it, where + "/items"));
      }
      int64_t mn = 0, mx = -1;
      if (auto it = s.find("minItems"); it != s.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000) {
          return Bad(where + "/minItems", "must be an integer in [0, 1000000]");
        }
        mn = it->get<int64_t>();
      }
      if (auto it = s.find("maxItems"); it != s.end()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1000000) {
          return Bad(where + "/maxItems", "must be an integer in [0, 1000000]");
        }
        mx = it->get<int64_t>();
      }
      if (mx >= 0 && mx < mn) return Bad(where + "/maxItems", "is less than minItems");
      GrammarNode& a = g_->nodes[id];
      a.items = items;
      a.min_items = static_cast<uint32_t>(mn);
      a.max_items = mx;
      a.count_cap = static_cast<uint32_t>(std::max<int64_t>(mn, mx));
      return id;
    }
    if (type == "object") {
      n.kind = NodeKind::kObject;
      const uint32_t id = Add(n);
      std::vector<GrammarNode::Prop> props;
      std::set<std::string> required;
      if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) return Bad(where + "/required", "must be an array of strings");
        for (size_t i = 0; i < it->size(); ++i) {
          if (!(*it)[i].is_string()) {
            return Bad(where + "/required/" + std::to_string(i), "must be a string");
          }
          required.insert((*it)[i].get<std::string>());
        }
      }
      auto p = s.find("properties");
      if (p != s.end()) {
        if (!p->is_object()) return Bad(where + "/properties", "must be an object");
        for (auto it = p->begin(); it != p->end(); ++it) {
          GrammarNode::Prop prop;
          prop.key = json(it.key()).dump();
          prop.required = required.count(it.key()) > 0;
          OCTET_ASSIGN_OR_RETURN(prop.node,
                                 Node(it.value(), where + "/properties/" + PointerToken(it.key())));
          props.push_back(std::move(prop));
        }
      }
      for (const std::string& r : required) {
        bool found = false;
        for (const auto& pr : props) found = found || pr.key == json(r).dump();
        if (!found) {
          return Bad(where + "/required", "'" + r + "' is required but not among the properties");
        }
      }
      int64_t additional = -1;
      auto ad = s.find("additionalProperties");
      if (props.empty()) {
        additional = g_->any;
        if (ad != s.end()) {
          if (ad->is_boolean() && !ad->get<bool>()) {
            additional = -1;  // only {}
          } else {
            OCTET_ASSIGN_OR_RETURN(uint32_t v, Node(*ad, where + "/additionalProperties"));
            additional = v;
          }
        }
      } else if (ad != s.end() && !ad->is_boolean()) {
        // Checked for errors; the output holds only the declared properties.
        OCTET_ASSIGN_OR_RETURN(uint32_t v, Node(*ad, where + "/additionalProperties"));
        (void)v;
      }
      GrammarNode& o = g_->nodes[id];
      o.props = std::move(props);
      o.additional = additional;
      return id;
    }
    return Bad(where + "/type", "unknown type '" + type + "'");
  }

  Result<uint32_t> Ref(const json& r, const std::string& where) {
    if (!r.is_string()) return Bad(where, "$ref must be a string");
    const std::string ref = r.get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    std::string target;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (ref.rfind(prefix, 0) == 0) target = ref;
    }
    if (ref == "#") target = ref;
    if (target.empty()) {
      return Bad(where,
                 "only local references (#, #/$defs/NAME, #/definitions/NAME) are supported");
    }
    const json* node = nullptr;
    try {
      node = &root_.at(json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      return Bad(where, "'" + ref + "' does not resolve");
    }
    // A placeholder first, so that recursive references end here.
    GrammarNode alias;
    alias.kind = NodeKind::kAnyOf;
    const uint32_t id = Add(alias);
    refs_[ref] = id;
    OCTET_ASSIGN_OR_RETURN(uint32_t target_id, Node(*node, ref.substr(1)));
    g_->nodes[id].alts = {target_id};
    return id;
  }

 private:
  const json& root_;
  JsonGrammar* g_ = nullptr;
  std::map<std::string, uint32_t> refs_;
};

// ---- the automaton ------------------------------------------------------------------

bool IsWs(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

enum : uint8_t { kTopBefore = 0, kTopIn = 1, kTopDone = 2 };
enum : uint8_t { kObjOpen = 0, kObjInKey, kObjAfterKey, kObjInValue, kObjAfterValue, kObjNeedKey };
enum : uint8_t { kArrOpen = 0, kArrInValue, kArrAfterValue };
enum : uint8_t { kNumMinus = 1, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };
constexpr uint32_t kFreeKey = 0xFFFFFFFFu;

class Stepper {
 public:
  Stepper(const JsonGrammar& g, GrammarState* out) : g_(g), out_(out) {}

  void Step(Stack s, uint8_t c, int depth = 0) {
    if (depth > 64 || s.empty()) return;  // anyOf cycles without progress
    Frame& f = s.back();
    switch (f.kind) {
      case FrameKind::kTop:
        if (f.st == kTopBefore) {
          if (IsWs(c)) return;
          f.st = kTopIn;
          s.push_back(Frame{FrameKind::kValue, 0, 0, 0, g_.root, 0, 0});
          return Step(std::move(s), c, depth + 1);
        }
        return;  // kTopDone: nothing but the end
      case FrameKind::kValue:
        return Value(std::move(s), c, depth);
      case FrameKind::kLiteral: {
        const std::string& lit = g_.nodes[f.node].literals[f.a];
        if (f.b >= lit.size() || static_cast<uint8_t>(lit[f.b]) != c) return;
        if (++f.b == lit.size()) Complete(s);
        return Emit(std::move(s));
      }
      case FrameKind::kKey: {
        const std::string& key = g_.nodes[f.node].props[f.a].key;
        if (f.b >= key.size() || static_cast<uint8_t>(key[f.b]) != c) return;
        if (++f.b == key.size()) Complete(s);
        return Emit(std::move(s));
      }
      case FrameKind::kString:
        if (f.st == 0) {
          if (c == '"') {
            Complete(s);
          } else if (c == '\\') {
            f.st = 1;
          } else if (c < 0x20) {
            return;
          }
        } else if (f.st == 1) {
          if (c == 'u') {
            f.st = 2;
          } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                     c == 'r' || c == 't') {
            f.st = 0;
          } else {
            return;
          }
        } else {
          if (!IsHex(c)) return;
          f.st = f.st == 5 ? 0 : f.st + 1;
        }
        return Emit(std::move(s));
      case FrameKind::kNumber:
        return Number(std::move(s), c, depth);
      case FrameKind::kObject:
        return Object(std::move(s), c);
      case FrameKind::kArray:
        return Array(std::move(s), c, depth);
    }
  }

 private:
  void Emit(Stack s) {
    for (const Stack& o : *out_) {
      if (o == s) return;
    }
    out_->push_back(std::move(s));
  }

  // The top frame is a finished value or key: pop it and move its parent on.
  static void Complete(Stack& s) {
    const Frame child = s.back();
    s.pop_back();
    Frame& p = s.back();
    p.ws = 0;
    switch (p.kind) {
      case FrameKind::kTop:
        p.st = kTopDone;
        break;
      case FrameKind::kObject:
        if (p.st == kObjInKey) {
          p.st = kObjAfterKey;
          if (child.kind == FrameKind::kKey) {
            p.b = child.a;
            p.a = child.a + 1;
          } else {
            p.b = kFreeKey;
          }
        } else {
          p.st = kObjAfterValue;
        }
        break;
      case FrameKind::kArray:
        p.st = kArrAfterValue;
        break;
      default:
        break;
    }
  }

  // Whitespace in a structural position.
  bool Ws(Frame& f, uint8_t c, bool* handled) {
    *handled = IsWs(c);
    if (!*handled) return true;
    if (f.ws >= kMaxWhitespace) return false;
    f.ws += 1;
    return true;
  }

  void Value(Stack s, uint8_t c, int depth) {
    Frame& f = s.back();
    bool ws;
    if (!Ws(f, c, &ws)) return;
    if (ws) return Emit(std::move(s));
    const GrammarNode& n = g_.nodes[f.node];
    switch (n.kind) {
      case NodeKind::kAnyOf:
        for (uint32_t alt : n.alts) {
          Stack t = s;
          t.back().node = alt;
          Step(std::move(t), c, depth + 1);
        }
        return;
      case NodeKind::kAny:
        if (c == '{') {
          f.node = g_.any_object;
        } else if (c == '[') {
          f.node = g_.any_array;
        } else if (c == '"') {
          f = Frame{FrameKind::kString, 0, 0, 0, 0, 0, 0};
          return Emit(std::move(s));
        } else if (c == '-' || IsDigit(c)) {
          f.node = g_.number;
        } else if (c == 't' || c == 'f' || c == 'n') {
          f.node = g_.tfn;
        } else {
          return;
        }
        return Step(std::move(s), c, depth + 1);
      case NodeKind::kObject:
        if (c != '{') return;
        f = Frame{FrameKind::kObject, kObjOpen, 0, 0, f.node, 0, 0};
        return Emit(std::move(s));
      case NodeKind::kArray:
        if (c != '[') return;
        f = Frame{FrameKind::kArray, kArrOpen, 0, 0, f.node, 0, 0};
        return Emit(std::move(s));
      case NodeKind::kString:
        if (c != '"') return;
        f = Frame{FrameKind::kString, 0, 0, 0, 0, 0, 0};
        return Emit(std::move(s));
      case NodeKind::kNumber:
      case NodeKind::kInteger: {
        uint8_t st;
        if (c == '-') {
          st = kNumMinus;
        } else if (c == '0') {
          st = kNumZero;
        } else if (IsDigit(c)) {
          st = kNumInt;
        } else {
          return;
        }
        f = Frame{FrameKind::kNumber, st, 0, 0, f.node, 1, st == kNumInt ? 1u : 0u};
        return Emit(std::move(s));
      }
      case NodeKind::kLiterals:
        for (uint32_t i = 0; i < n.literals.size(); ++i) {
          const std::string& lit = n.literals[i];
          if (lit.empty() || static_cast<uint8_t>(lit[0]) != c) continue;
          Stack t = s;
          t.back() = Frame{FrameKind::kLiteral, 0, 0, 0, f.node, i, 1};
          if (lit.size() == 1) Complete(t);
          Emit(std::move(t));
        }
        return;
    }
  }

  static bool NumberDone(uint8_t st) {
    return st == kNumZero || st == kNumInt || st == kNumFrac || st == kNumExp;
  }

  void Number(Stack s, uint8_t c, int depth) {
    Frame& f = s.back();
    const bool integer = g_.nodes[f.node].kind == NodeKind::kInteger;
    uint8_t next = 0;
    switch (f.st) {
      case kNumMinus:
        next = c == '0' ? kNumZero : IsDigit(c) ? kNumInt : 0;
        break;
      case kNumZero:
        next = (c == '.' && !integer) ? kNumDot : ((c == 'e' || c == 'E') && !integer) ? kNumE : 0;
        break;
      case kNumInt:
        next = IsDigit(c)                             ? kNumInt
               : (c == '.' && !integer)               ? kNumDot
               : ((c == 'e' || c == 'E') && !integer) ? kNumE
                                                      : 0;
        break;
      case kNumDot:
        next = IsDigit(c) ? kNumFrac : 0;
        break;
      case kNumFrac:
        next = IsDigit(c) ? kNumFrac : (c == 'e' || c == 'E') ? kNumE : 0;
        break;
      case kNumE:
        next = (c == '+' || c == '-') ? kNumESign : IsDigit(c) ? kNumExp : 0;
        break;
      case kNumESign:
      case kNumExp:
        next = IsDigit(c) ? kNumExp : 0;
        break;
    }
    if (next != 0) {
      // Bounded so that every parser reads the number back exactly: at most
      // 15 integer digits (int64 and double), 2 exponent digits.
      if (f.a >= static_cast<uint32_t>(kMaxNumberChars)) return;
      if (next == kNumInt || next == kNumExp) {
        const uint32_t limit = next == kNumInt ? 15 : 2;
        const uint32_t run = f.st == next ? f.b + 1 : 1;
        if (run > limit) return;
        f.b = run;
      }
      f.st = next;
      f.a += 1;
      return Emit(std::move(s));
    }
    if (!NumberDone(f.st)) return;
    Complete(s);  // the number ends here; the byte belongs to its parent
    Step(std::move(s), c, depth + 1);
  }

  void Object(Stack s, uint8_t c) {
    Frame& f = s.back();
    const GrammarNode& n = g_.nodes[f.node];
    bool ws;
    auto can_close = [&] {
      for (size_t j = f.a; j < n.props.size(); ++j) {
        if (n.props[j].required) return false;
      }
      return true;
    };
    auto start_key = [&] {
      f.st = kObjInKey;
      f.ws = 0;
      for (uint32_t j = f.a; j < n.props.size(); ++j) {
        Stack t = s;
        t.push_back(Frame{FrameKind::kKey, 0, 0, 0, f.node, j, 1});
        Emit(std::move(t));
        if (n.props[j].required) break;
      }
      if (n.props.empty() && n.additional >= 0) {
        Stack t = s;
        t.push_back(Frame{FrameKind::kString, 0, 0, 1, 0, 0, 0});
        Emit(std::move(t));
      }
    };
    switch (f.st) {
      case kObjOpen:
      case kObjNeedKey:
        if (!Ws(f, c, &ws)) return;
        if (ws) return Emit(std::move(s));
        if (c == '}' && f.st == kObjOpen && can_close()) {
          Complete(s);
          return Emit(std::move(s));
        }
        if (c == '"') start_key();
        return;
      case kObjAfterKey: {
        if (!Ws(f, c, &ws)) return;
        if (ws) return Emit(std::move(s));
        if (c != ':') return;
        const uint32_t value =
            f.b == kFreeKey ? static_cast<uint32_t>(n.additional) : n.props[f.b].node;
        f.st = kObjInValue;
        f.ws = 0;
        s.push_back(Frame{FrameKind::kValue, 0, 0, 0, value, 0, 0});
        return Emit(std::move(s));
      }
      case kObjAfterValue: {
        if (!Ws(f, c, &ws)) return;
        if (ws) return Emit(std::move(s));
        if (c == '}' && can_close()) {
          Complete(s);
          return Emit(std::move(s));
        }
        const bool more = f.a < n.props.size() || (n.props.empty() && n.additional >= 0);
        if (c == ',' && more) {
          f.st = kObjNeedKey;
          f.ws = 0;
          return Emit(std::move(s));
        }
        return;
      }
      default:
        return;
    }
  }

  void Array(Stack s, uint8_t c, int depth) {
    Frame& f = s.back();
    const GrammarNode& n = g_.nodes[f.node];
    bool ws;
    if (!Ws(f, c, &ws)) return;
    if (ws) return Emit(std::move(s));
    const bool below_max = n.max_items < 0 || f.a < static_cast<uint64_t>(n.max_items);
    if (c == ']' && f.a >= n.min_items) {
      Complete(s);
      return Emit(std::move(s));
    }
    auto push_value = [&] {
      f.a = std::min(f.a + 1, n.count_cap);
      f.st = kArrInValue;
      f.ws = 0;
      s.push_back(Frame{FrameKind::kValue, 0, 0, 0, n.items, 0, 0});
    };
    if (f.st == kArrOpen) {
      if (!below_max) return;
      push_value();
      return Step(std::move(s), c, depth + 1);
    }
    if (f.st == kArrAfterValue && c == ',' && below_max) {
      push_value();
      return Emit(std::move(s));
    }
  }

  const JsonGrammar& g_;
  GrammarState* out_;
};

}  // namespace

GrammarState InitialState(const JsonGrammar&) {
  return GrammarState{Stack{Frame{FrameKind::kTop, kTopBefore, 0, 0, 0, 0, 0}}};
}

void StepState(const JsonGrammar& g, const GrammarState& in, uint8_t c, GrammarState* out) {
  out->clear();
  Stepper st(g, out);
  for (const Stack& s : in) st.Step(s, c);
}

bool StateAccepting(const JsonGrammar&, const GrammarState& state) {
  for (const Stack& s : state) {
    if (s.size() == 1 && s[0].st == kTopDone) return true;
    // A top-level number ends with the input.
    if (s.size() == 2 && s[1].kind == FrameKind::kNumber &&
        (s[1].st == kNumZero || s[1].st == kNumInt || s[1].st == kNumFrac || s[1].st == kNumExp)) {
      return true;
    }
  }
  return false;
}

std::string StateKeyOf(const GrammarState& state) {
  std::string key;
  for (const Stack& s : state) {
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(Frame));
    key.push_back('\xff');
  }
  return key;
}

Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(std::string_view schema_json) {
  json j = json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("the schema is not valid JSON");
  return Compiler(j).Run();
}

std::shared_ptr<const JsonGrammar> AnyJsonObjectGrammar() {
  static const std::shared_ptr<const JsonGrammar> g = [] {
    auto r = CompileJsonSchema(R"({"type":"object"})");
    return *r;
  }();
  return g;
}

// ---- JsonMatcher ----------------------------------------------------------------------

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar)
    : grammar_(std::move(grammar)), state_(std::make_unique<State>()) {
  state_->s = InitialState(*grammar_);
}
JsonMatcher::~JsonMatcher() = default;
JsonMatcher::JsonMatcher(const JsonMatcher& o)
    : grammar_(o.grammar_), state_(std::make_unique<State>(*o.state_)) {}
JsonMatcher& JsonMatcher::operator=(const JsonMatcher& o) {
  grammar_ = o.grammar_;
  state_ = std::make_unique<State>(*o.state_);
  return *this;
}

bool JsonMatcher::Feed(std::string_view bytes) {
  GrammarState cur = state_->s, next;
  for (char c : bytes) {
    StepState(*grammar_, cur, static_cast<uint8_t>(c), &next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  state_->s = std::move(cur);
  return true;
}

bool JsonMatcher::Accepting() const { return StateAccepting(*grammar_, state_->s); }

std::string JsonMatcher::StateKey() const { return StateKeyOf(state_->s); }

}  // namespace octet::engine
