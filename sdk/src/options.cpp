#include "lithe/sdk/options.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lithe/sdk/error.h"
#include "lithe/sdk_internal/options_json.h"

namespace lithe::sdk {
namespace {

using json = nlohmann::ordered_json;

// Values are quoted shortened: a config may hold a 10 MB string.
std::string show(const json& value) { return printable(value.dump(), 120); }

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (the object has 'sparsty': did you mean 'sparsity'?)" when a key of `object` is a likely
// misspelling of the missing `key`; otherwise the keys it does have.
std::string missing_key_hint(const json& object, const std::string& key) {
  std::string nearest;
  size_t best = std::max<size_t>(2, key.size() / 3) + 1;
  std::string present;
  for (const auto& item : object.items()) {
    if (item.key().size() > 200) {
      continue;
    }
    const size_t d = edit_distance(item.key(), key);
    if (d < best) {
      best = d;
      nearest = item.key();
    }
    if (present.size() < 200) {
      present += (present.empty() ? "'" : ", '") + printable(item.key(), 40) + "'";
    }
  }
  if (!nearest.empty()) {
    return " (the object has the unknown key '" + printable(nearest, 40) + "': did you mean '" +
           key + "'?)";
  }
  return present.empty() ? " (the object is empty)" : " (keys present: " + present + ")";
}

void remember_read(Options::Impl& impl, const std::string& key) {
  if (std::find(impl.read_keys.begin(), impl.read_keys.end(), key) == impl.read_keys.end()) {
    impl.read_keys.push_back(key);
  }
}

// Converters: one per supported type, each naming the rule it enforces.
template <class T>
struct Convert;

template <>
struct Convert<bool> {
  static bool from(const json& v, const std::string& where) {
    LITHE_CHECK(v.is_boolean(), Errc::kInvalidConfig, where, " must be true or false, got ",
                show(v));
    return v.get<bool>();
  }
};

template <>
struct Convert<int64_t> {
  static int64_t from(const json& v, const std::string& where) {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned()) {
        LITHE_CHECK(v.get<uint64_t>() <=
                        static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
                    Errc::kInvalidConfig, where, " is out of the 64-bit integer range, got ",
                    show(v));
      }
      return v.get<int64_t>();
    }
    LITHE_CHECK(false, Errc::kInvalidConfig, where, " must be an integer, got ", show(v));
    return 0;
  }
};

template <>
struct Convert<double> {
  static double from(const json& v, const std::string& where) {
    LITHE_CHECK(v.is_number(), Errc::kInvalidConfig, where, " must be a number, got ", show(v));
    const double d = v.get<double>();
    LITHE_CHECK(std::isfinite(d), Errc::kInvalidConfig, where, " must be finite, got ", show(v));
    return d;
  }
};

template <>
struct Convert<std::string> {
  static std::string from(const json& v, const std::string& where) {
    LITHE_CHECK(v.is_string(), Errc::kInvalidConfig, where, " must be a string, got ", show(v));
    return v.get<std::string>();
  }
};

template <class E>
struct Convert<std::vector<E>> {
  static std::vector<E> from(const json& v, const std::string& where) {
    LITHE_CHECK(v.is_array(), Errc::kInvalidConfig, where, " must be a list, got ", show(v));
    std::vector<E> out;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      out.push_back(Convert<E>::from(v[i], where + "/" + std::to_string(i)));
    }
    return out;
  }
};

}  // namespace

std::string json_pointer_append(const std::string& path, const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return path + "/" + escaped;
}

Options options_from_json(const json& object, const std::string& path) {
  LITHE_CHECK(object.is_object(), Errc::kInvalidConfig, path.empty() ? "the document" : path,
              " must be a JSON object, got ", show(object));
  auto impl = std::make_shared<Options::Impl>();
  impl->value = object;
  impl->path = path;
  return Options(std::move(impl));
}

std::vector<std::string> unread_option_paths(const Options& options) {
  std::vector<std::string> out;
  const Options::Impl& impl = *options.impl();
  for (const auto& item : impl.value.items()) {
    const bool read = std::find(impl.read_keys.begin(), impl.read_keys.end(), item.key()) !=
                      impl.read_keys.end();
    if (!read) {
      out.push_back(json_pointer_append(impl.path, item.key()));
    }
  }
  for (const auto& [key, child] : impl.children) {
    std::vector<std::string> nested = unread_option_paths(Options(child));
    out.insert(out.end(), nested.begin(), nested.end());
  }
  return out;
}

const json& options_json(const Options& options) { return options.impl()->value; }

Options::Options() : impl_(std::make_shared<Impl>()) { impl_->value = json::object(); }
Options::~Options() = default;
Options::Options(const Options&) = default;
Options& Options::operator=(const Options&) = default;
Options::Options(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {
  LITHE_INTERNAL_ASSERT(impl_ != nullptr && impl_->value.is_object());
}

const std::string& Options::path() const { return impl_->path; }

bool Options::has(const std::string& key) const { return impl_->value.contains(key); }

template <class T>
T Options::require(const std::string& key) const {
  const auto it = impl_->value.find(key);
  LITHE_CHECK(it != impl_->value.end(), Errc::kInvalidConfig,
              impl_->path.empty() ? "the document" : impl_->path, ": missing required key '",
              key, "'", missing_key_hint(impl_->value, key));
  remember_read(*impl_, key);
  return Convert<T>::from(*it, json_pointer_append(impl_->path, key));
}

template <class T>
T Options::get_or(const std::string& key, T fallback) const {
  const auto it = impl_->value.find(key);
  if (it == impl_->value.end()) {
    return fallback;
  }
  remember_read(*impl_, key);
  return Convert<T>::from(*it, json_pointer_append(impl_->path, key));
}

Options Options::child(const std::string& key) const {
  const auto it = impl_->value.find(key);
  const std::string where = json_pointer_append(impl_->path, key);
  LITHE_CHECK(it != impl_->value.end(), Errc::kInvalidConfig,
              impl_->path.empty() ? "the document" : impl_->path, ": missing required key '",
              key, "'", missing_key_hint(impl_->value, key));
  remember_read(*impl_, key);
  for (const auto& [name, existing] : impl_->children) {
    if (name == key) {
      return Options(existing);
    }
  }
  Options nested = options_from_json(*it, where);
  impl_->children.emplace_back(key, nested.impl());
  return nested;
}

void Options::mark_read(const std::string& key) const { remember_read(*impl_, key); }

std::vector<std::string> Options::keys() const {
  std::vector<std::string> out;
  for (const auto& item : impl_->value.items()) {
    out.push_back(item.key());
  }
  return out;
}

std::string Options::dump() const { return impl_->value.dump(); }

#define LITHE_DETAIL_DEFINE_OPTION_TYPE(T)                                         \
  template LITHE_SDK_API T Options::require<T>(const std::string&) const; \
  template LITHE_SDK_API T Options::get_or<T>(const std::string&, T) const;
LITHE_DETAIL_DEFINE_OPTION_TYPE(bool)
LITHE_DETAIL_DEFINE_OPTION_TYPE(int64_t)
LITHE_DETAIL_DEFINE_OPTION_TYPE(double)
LITHE_DETAIL_DEFINE_OPTION_TYPE(std::string)
LITHE_DETAIL_DEFINE_OPTION_TYPE(std::vector<int64_t>)
LITHE_DETAIL_DEFINE_OPTION_TYPE(std::vector<double>)
LITHE_DETAIL_DEFINE_OPTION_TYPE(std::vector<std::string>)
#undef LITHE_DETAIL_DEFINE_OPTION_TYPE

}  // namespace lithe::sdk
