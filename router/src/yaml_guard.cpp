#include "octet/router/yaml_guard.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace octet::router {
namespace {

class ShapeHandler : public YAML::EventHandler {
 public:
  explicit ShapeHandler(const YamlShapeLimits& limits) : limits_(limits) {}

  const YamlShapeIssue& issue() const { return issue_; }
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ == 2)
      Fail(mark, "the file holds more than one YAML document ('---'); give one");
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor, 1); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = sizes_.find(anchor);
    // An alias of a node still open (a recursive one) counts once.
    const int64_t size = it == sizes_.end() ? 1 : it->second;
    Add(size, mark);
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CheckTag(mark, tag);
    Leaf(anchor, 1 + static_cast<int64_t>(value.size()), mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, tag, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, tag, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct OpenNode {
    YAML::anchor_t anchor;
    int64_t size;
  };

  void Fail(const YAML::Mark& mark, std::string message) {
    if (!issue_.ok()) return;
    issue_.line = mark.is_null() ? 0 : mark.line + 1;
    issue_.column = mark.is_null() ? 0 : mark.column + 1;
    issue_.message = std::move(message);
  }
  // Sizes saturate just past the limit: nested aliases multiply.
  int64_t Saturate(int64_t v) const { return std::min(v, limits_.max_expanded_bytes + 1); }
  void Add(int64_t size, const YAML::Mark& mark) {
    int64_t& target = open_.empty() ? total_ : open_.back().size;
    target = Saturate(target + size);
    if (target > limits_.max_expanded_bytes) {
      std::ostringstream m;
      m << "aliases expand the document to more than " << (limits_.max_expanded_bytes >> 20)
        << " MiB; write the values out or use fewer aliases";
      Fail(mark, m.str());
    }
  }
  void Leaf(YAML::anchor_t anchor, int64_t size, const YAML::Mark& mark = YAML::Mark::null_mark()) {
    if (anchor != YAML::NullAnchor) sizes_[anchor] = size;
    Add(size, mark);
  }
  void CheckTag(const YAML::Mark& mark, const std::string& tag) {
    if (tag.empty() || tag == "?" || tag == "!" || tag.rfind("tag:yaml.org,2002:", 0) == 0) return;
    Fail(mark,
         "unknown YAML tag (" + std::to_string(tag.size()) + " characters); a policy uses none");
  }
  void Open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    CheckTag(mark, tag);
    open_.push_back({anchor, 1});
    marks_.push_back(mark);
  }
  void Close() {
    if (open_.empty()) return;
    const OpenNode node = open_.back();
    const YAML::Mark mark = marks_.back();
    open_.pop_back();
    marks_.pop_back();
    if (node.anchor != YAML::NullAnchor) sizes_[node.anchor] = node.size;
    Add(node.size, mark);
  }

  const YamlShapeLimits& limits_;
  YamlShapeIssue issue_;
  int documents_ = 0;
  int64_t total_ = 0;
  std::vector<OpenNode> open_;
  std::vector<YAML::Mark> marks_;
  std::unordered_map<YAML::anchor_t, int64_t> sizes_;
};

}  // namespace

YamlShapeIssue CheckYamlShape(std::string_view text, const YamlShapeLimits& limits) {
  std::istringstream in{std::string(text)};
  ShapeHandler handler(limits);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(handler)) {
      if (!handler.issue().ok()) break;
    }
  } catch (const YAML::Exception&) {
    return {};  // the loader reports syntax errors with their place
  }
  return handler.issue();
}

}  // namespace octet::router
