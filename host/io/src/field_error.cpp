#include "lithe/host/io/field_error.h"

#include <cctype>
#include <utility>

namespace lithe::host {
namespace {

// U+E000 and U+E001 (private use): survive sdk::Error's one-line rule (it escapes control
// characters only) and appear in no file name a user would choose.
constexpr std::string_view kOpen = "\xee\x80\x80";
constexpr std::string_view kClose = "\xee\x80\x81";

bool is_field_name(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return false;
  }
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::islower(u) || std::isdigit(u) || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

// Calls text(piece) for the text between fields and field(name) for each well-formed mark; a
// mark around anything but a field name is kept as text.
template <class Text, class Field>
void walk(std::string_view message, Text&& text, Field&& field) {
  size_t at = 0;
  while (at < message.size()) {
    const size_t open = message.find(kOpen, at);
    if (open == std::string_view::npos) {
      break;
    }
    const size_t name_start = open + kOpen.size();
    const size_t close = message.find(kClose, name_start);
    if (close == std::string_view::npos) {
      break;
    }
    const std::string_view name = message.substr(name_start, close - name_start);
    if (!is_field_name(name)) {
      text(message.substr(at, name_start - at));
      at = name_start;
      continue;
    }
    text(message.substr(at, open - at));
    field(std::string(name));
    at = close + kClose.size();
  }
  text(message.substr(at));
}

std::string render(std::string_view marked, const FieldWords& word) {
  std::string out;
  walk(
      marked, [&](std::string_view piece) { out += piece; },
      [&](const std::string& name) {
        const std::string w = word ? word(name) : std::string();
        out += w.empty() ? "`" + name + "`" : w;
      });
  return out;
}

}  // namespace

std::string field_ref(std::string_view name) {
  LITHE_INTERNAL_ASSERT(is_field_name(name));
  std::string out;
  out.reserve(name.size() + kOpen.size() + kClose.size());
  out += kOpen;
  out += name;
  out += kClose;
  return out;
}

bool has_field_refs(const std::string& message) {
  bool found = false;
  walk(
      message, [](std::string_view) {}, [&](const std::string&) { found = true; });
  return found;
}

FieldText::FieldText(std::string marked) : marked_(std::move(marked)) {}

std::string FieldText::in_words(const FieldWords& word) const { return render(marked_, word); }

std::vector<std::string> FieldText::fields() const {
  std::vector<std::string> names;
  walk(
      marked_, [](std::string_view) {}, [&](const std::string& name) { names.push_back(name); });
  return names;
}

FieldError::FieldError(sdk::Errc code, const std::string& marked)
    : sdk::Error(code, render(marked, {})),
      text_(sdk::Error(code, marked).what()) {}  // one line, as what()

}  // namespace lithe::host
