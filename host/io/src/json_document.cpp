// Bounded JSON parsing: the parser callback tracks where it is (a JSON Pointer) so that the
// depth limit and duplicate keys are caught at the byte that breaks them, and parse errors
// (which nlohmann reports by byte offset only) can say which value was being read.
#include "lithe/host/io/json_document.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "lithe/host/io/file_io.h"
#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::host {
namespace {

using json = nlohmann::ordered_json;

struct Frame {
  bool array = false;
  size_t index = 0;         // arrays: the element being read
  std::string key;          // objects: the member being read
  bool has_key = false;
  std::unordered_set<std::string> keys;
};

class PathTracker {
 public:
  PathTracker(std::string source, int max_depth)
      : source_(std::move(source)), max_depth_(max_depth) {}

  bool on_event(json::parse_event_t event, const json& parsed) {
    using Event = json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        LITHE_CHECK(static_cast<int>(frames_.size()) < max_depth_, sdk::Errc::kInvalidConfig,
                    source_, ": ", where(), " nests deeper than ", max_depth_,
                    " levels of objects and arrays (the limit for a Lithe document)");
        frames_.emplace_back();
        frames_.back().array = event == Event::array_start;
        break;
      case Event::key: {
        Frame& top = frames_.back();
        const std::string& key = parsed.get_ref<const std::string&>();
        top.key = key;
        top.has_key = true;
        LITHE_CHECK(top.keys.insert(key).second, sdk::Errc::kInvalidConfig, source_, ": ",
                    where(), " appears twice in one object (JSON keys must be unique)");
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        advance();
        break;
      case Event::value:
        advance();
        break;
    }
    return true;
  }

  /// JSON Pointer of the value being read ("the document" at the top).
  std::string where() const {
    std::string path;
    for (const Frame& frame : frames_) {
      if (frame.array) {
        path += "/" + std::to_string(frame.index);
      } else if (frame.has_key) {
        path = sdk::json_pointer_append(path, sdk::printable(frame.key, 60));
      }
    }
    return path.empty() ? "the document" : path;
  }

 private:
  void advance() {
    if (!frames_.empty() && frames_.back().array) {
      ++frames_.back().index;
    }
  }

  std::string source_;
  int max_depth_;
  std::vector<Frame> frames_;
};

// "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while
// parsing value - invalid literal; last read: '...'" -> the part after the location, shortened.
std::string parser_reason(const std::string& what) {
  const size_t colon = what.find(": ");
  std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
  return sdk::printable(reason, 160);
}

}  // namespace

json parse_json_document(const std::string& text, const std::string& source, int max_depth) {
  PathTracker tracker(source, max_depth);
  try {
    return json::parse(text, [&](int /*depth*/, json::parse_event_t event,
                                 json& parsed) { return tracker.on_event(event, parsed); });
  } catch (const json::parse_error& e) {
    throw sdk::Error(sdk::Errc::kInvalidConfig,
                     source + ": not valid JSON at " + tracker.where() + " (byte " +
                         std::to_string(e.byte) + "): " + parser_reason(e.what()));
  } catch (const json::exception& e) {
    // e.g. out_of_range.406 "number overflow parsing '1e999'"
    throw sdk::Error(sdk::Errc::kInvalidConfig, source + ": " + tracker.where() +
                                                    " cannot be read: " + parser_reason(e.what()));
  }
}

json read_json_document(const std::filesystem::path& path, int max_depth) {
  return parse_json_document(read_file(path), path.string(), max_depth);
}

}  // namespace lithe::host
