// The pickle layer of the archive checks (pickle_scan.h).
#include "pickle_scan.h"

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lithe::host::archive {
namespace {

/// A bounded pickle machine for the opcodes torch's Pickler and Python's torch.save emit. It
/// tracks only what storage declarations need (strings, ints, tuples, globals); everything else
/// is an opaque placeholder. Strings are views into the pickle, so memory stays proportional to
/// the number of opcodes, which the pickle's length bounds.
class PickleScanner {
 public:
  PickleScanner(std::string_view pickle, std::string_view name, const Reporter& report,
                std::function<void(const StorageClaim&)> on_storage)
      : pickle_(pickle), name_(name), report_(report), on_storage_(std::move(on_storage)) {}

  void run() {
    while (pos_ < pickle_.size()) {
      if (++ops_ > kMaxOps) {
        fail("more than " + std::to_string(kMaxOps) + " opcodes");
      }
      op_start_ = pos_;
      opcode_ = static_cast<unsigned char>(pickle_[pos_++]);
      if (step()) {
        return;
      }
    }
    report_.fail("pickle " + quote_name(name_) + " ends after " + std::to_string(pickle_.size()) +
                 " bytes without a STOP opcode; the archive is truncated or corrupted");
  }

 private:
  // Bounds on the machine's state, so a hostile pickle costs at most about a gigabyte however
  // long it is. torch's own pickles stay far below them (a model with 100,000 tensors memoizes
  // about a million values).
  static constexpr uint64_t kMaxOps = uint64_t{1} << 31;
  static constexpr size_t kMaxStack = size_t{1} << 24;
  static constexpr size_t kMaxMemo = size_t{1} << 22;
  static constexpr size_t kMaxMarks = size_t{1} << 20;
  static constexpr size_t kMaxTableEntries = size_t{1} << 24;  ///< strings, globals, tuple items

  enum class Kind : uint8_t { kOpaque, kInt, kBigInt, kText, kGlobal, kTuple };
  struct Value {
    Kind kind = Kind::kOpaque;
    int64_t payload = 0;  ///< kInt: the value; kText, kGlobal, kTuple: index into their table
  };

  [[noreturn]] void fail(const std::string& problem) const {
    report_.fail("pickle " + quote_name(name_) + " is malformed at byte " +
                 std::to_string(op_start_) + " (opcode " + hex_byte(opcode_) + "): " + problem +
                 "; libtorch cannot read it safely");
  }
  static std::string hex_byte(unsigned value) {
    char text[8];
    std::snprintf(text, sizeof text, "0x%02x", value & 0xFFu);
    return text;
  }

  // --- arguments
  std::string_view take(uint64_t length) {
    if (length > pickle_.size() - pos_) {
      fail("its argument of " + std::to_string(length) + " bytes runs past the end (" +
           std::to_string(pickle_.size() - pos_) + " left)");
    }
    const std::string_view out = pickle_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  uint64_t take_le(unsigned width) { return read_le(take(width), 0, width); }
  std::string_view take_line() {
    const size_t end = pickle_.find('\n', pos_);
    if (end == std::string_view::npos) {
      fail("its newline-terminated argument runs past the end");
    }
    const std::string_view line = pickle_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  // --- stack; pops see only the current frame (above the last MARK), as in Python's unpickler
  size_t frame_base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value value) {
    if (stack_.size() >= kMaxStack) {
      fail("more than " + std::to_string(kMaxStack) + " values on the stack");
    }
    stack_.push_back(value);
  }
  Value pop() {
    if (stack_.size() <= frame_base()) {
      fail("stack underflow");
    }
    const Value value = stack_.back();
    stack_.pop_back();
    return value;
  }
  const Value& top() const {
    if (stack_.size() <= frame_base()) {
      fail("stack underflow");
    }
    return stack_.back();
  }
  /// Removes the last MARK; the values above it are stack_[returned index, end).
  size_t pop_mark() {
    if (marks_.empty()) {
      fail("no MARK to pop to");
    }
    const size_t base = marks_.back();
    marks_.pop_back();
    return base;
  }
  void grow_tables(size_t entries) {
    if (entries > kMaxTableEntries - table_entries_) {
      fail("more than " + std::to_string(kMaxTableEntries) + " strings, globals and tuple items");
    }
    table_entries_ += entries;
  }
  Value text_value(std::string_view text) {
    grow_tables(1);
    texts_.push_back(text);
    return {Kind::kText, static_cast<int64_t>(texts_.size() - 1)};
  }
  Value int_value(int64_t value) { return {Kind::kInt, value}; }
  Value tuple_value(std::vector<Value> items) {
    grow_tables(items.size() + 1);
    tuples_.push_back(std::move(items));
    return {Kind::kTuple, static_cast<int64_t>(tuples_.size() - 1)};
  }
  Value tuple_from_top(size_t count) {
    if (stack_.size() - frame_base() < count) {
      fail("stack underflow");
    }
    std::vector<Value> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return tuple_value(std::move(items));
  }
  void memo_put(uint64_t id) {
    // libtorch's Unpickler sizes its memo table by the largest id it sees, so one PUT of id
    // 171,079,263 in a 900-byte file makes it fill gigabytes. Picklers number their memo
    // entries from 0 without gaps (CPython's len(memo), torch's counter); refuse any other id.
    if (id > memo_.size()) {
      fail("memo id " + std::to_string(id) + " skips ahead of the " +
           std::to_string(memo_.size()) + " entries stored so far");
    }
    const Value value = top();
    const auto [it, inserted] = memo_.insert_or_assign(id, value);
    (void)it;
    if (inserted && memo_.size() > kMaxMemo) {
      fail("more than " + std::to_string(kMaxMemo) + " memo entries");
    }
  }
  void memo_get(uint64_t id) {
    const auto found = memo_.find(id);
    if (found == memo_.end()) {
      fail("memo entry " + std::to_string(id) + " was never stored");
    }
    push(found->second);
  }
  /// LONG1/LONG4: little-endian two's complement of any length.
  Value long_value(std::string_view bytes) {
    if (bytes.size() > 8) {
      return {Kind::kBigInt, 0};
    }
    if (bytes.empty()) {
      return int_value(0);
    }
    uint64_t raw = read_le(bytes, 0, static_cast<unsigned>(bytes.size()));
    const unsigned bits = static_cast<unsigned>(bytes.size()) * 8;
    if (bits < 64 && (raw >> (bits - 1)) != 0) {
      raw |= ~uint64_t{0} << bits;  // sign-extend
    }
    return int_value(static_cast<int64_t>(raw));
  }

  void persistent_id() {
    const Value id = pop();
    const auto fail_id = [&](const std::string& problem) {
      fail("a persistent id " + problem +
           " (torch expects ('storage', type, key, location, numel))");
    };
    if (id.kind != Kind::kTuple) {
      fail_id("is not a tuple");
    }
    const std::vector<Value>& items = tuples_[static_cast<size_t>(id.payload)];
    if (items.size() != 5 || items[0].kind != Kind::kText ||
        texts_[static_cast<size_t>(items[0].payload)] != "storage") {
      fail_id("is not a 5-tuple starting with 'storage'");
    }
    if (items[1].kind != Kind::kGlobal) {
      fail_id("names its storage type with something other than a global");
    }
    if (items[2].kind != Kind::kText || items[3].kind != Kind::kText) {
      fail_id("has a key or location that is not a string");
    }
    if (items[4].kind != Kind::kInt) {
      fail_id("has an element count that is not a 64-bit integer");
    }
    const auto& [type_module, type_name] = globals_[static_cast<size_t>(items[1].payload)];
    on_storage_(StorageClaim{type_module, type_name, texts_[static_cast<size_t>(items[2].payload)],
                             items[4].payload});
    push(Value{});
  }

  /// Executes the opcode just read; true at STOP.
  bool step() {
    switch (opcode_) {
      case 0x80:  // PROTO
        if (static_cast<unsigned char>(take(1)[0]) > 5) {
          fail("unsupported pickle protocol");
        }
        return false;
      case 0x95: {  // FRAME: a framing hint; the frame must be present
        const uint64_t length = take_le(8);
        if (length > pickle_.size() - pos_) {
          fail("its frame of " + std::to_string(length) + " bytes runs past the end");
        }
        return false;
      }
      case '.':  // STOP
        pop();
        return true;
      case '(':  // MARK
        if (marks_.size() >= kMaxMarks) {
          fail("more than " + std::to_string(kMaxMarks) + " nested MARKs");
        }
        marks_.push_back(stack_.size());
        return false;
      case '0':  // POP: Python pops the MARK when the frame is empty
        if (stack_.size() > frame_base()) {
          stack_.pop_back();
        } else if (!marks_.empty()) {
          pop_mark();
        } else {
          fail("stack underflow");
        }
        return false;
      case '1':  // POP_MARK
        stack_.resize(pop_mark());
        return false;
      case '2':  // DUP
        push(top());
        return false;
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
      case ']':   // EMPTY_LIST
      case '}':   // EMPTY_DICT
      case 0x8f:  // EMPTY_SET
        push(Value{});
        return false;
      case 'G':  // BINFLOAT
        take(8);
        push(Value{});
        return false;
      case 'J':  // BININT
        push(int_value(static_cast<int32_t>(static_cast<uint32_t>(take_le(4)))));
        return false;
      case 'K':  // BININT1
        push(int_value(static_cast<int64_t>(take_le(1))));
        return false;
      case 'M':  // BININT2
        push(int_value(static_cast<int64_t>(take_le(2))));
        return false;
      case 0x8a:  // LONG1
        push(long_value(take(take_le(1))));
        return false;
      case 0x8b: {  // LONG4: signed length
        const int32_t length = static_cast<int32_t>(static_cast<uint32_t>(take_le(4)));
        if (length < 0) {
          fail("negative LONG4 length");
        }
        push(long_value(take(static_cast<uint64_t>(length))));
        return false;
      }
      case 'X':  // BINUNICODE
        push(text_value(take(take_le(4))));
        return false;
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
        push(text_value(take(take_le(1))));
        return false;
      case 0x8d:  // BINUNICODE8
        push(text_value(take(take_le(8))));
        return false;
      case 'T': {  // BINSTRING: signed length
        const int32_t length = static_cast<int32_t>(static_cast<uint32_t>(take_le(4)));
        if (length < 0) {
          fail("negative BINSTRING length");
        }
        push(text_value(take(static_cast<uint64_t>(length))));
        return false;
      }
      case 'B':  // BINBYTES
        take(take_le(4));
        push(Value{});
        return false;
      case 'C':  // SHORT_BINBYTES
        take(take_le(1));
        push(Value{});
        return false;
      case ')':  // EMPTY_TUPLE
        push(tuple_value({}));
        return false;
      case 't': {  // TUPLE
        const size_t base = pop_mark();
        std::vector<Value> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
        stack_.resize(base);
        push(tuple_value(std::move(items)));
        return false;
      }
      case 0x85:  // TUPLE1
      case 0x86:  // TUPLE2
      case 0x87:  // TUPLE3
        push(tuple_from_top(opcode_ - 0x84u));
        return false;
      case 'a':  // APPEND: value onto the list below it
        pop();
        top();
        return false;
      case 's':  // SETITEM: key and value into the dict below them
        pop();
        pop();
        top();
        return false;
      case 'e':     // APPENDS
      case 0x90: {  // ADDITEMS
        stack_.resize(pop_mark());
        top();
        return false;
      }
      case 'u': {  // SETITEMS: key/value pairs; an odd count would make libtorch read past them
        const size_t base = pop_mark();
        if ((stack_.size() - base) % 2 != 0) {
          fail("SETITEMS with an odd number of keys and values");
        }
        stack_.resize(base);
        top();
        return false;
      }
      case 0x91:  // FROZENSET
        stack_.resize(pop_mark());
        push(Value{});
        return false;
      case 'q':  // BINPUT
        memo_put(take_le(1));
        return false;
      case 'r':  // LONG_BINPUT
        memo_put(take_le(4));
        return false;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        return false;
      case 'h':  // BINGET
        memo_get(take_le(1));
        return false;
      case 'j':  // LONG_BINGET
        memo_get(take_le(4));
        return false;
      case 'c': {  // GLOBAL module\nname\n
        const std::string_view module = take_line();
        const std::string_view name = take_line();
        grow_tables(1);
        globals_.emplace_back(module, name);
        push(Value{Kind::kGlobal, static_cast<int64_t>(globals_.size() - 1)});
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        const Value name = pop();
        const Value module = pop();
        if (name.kind != Kind::kText || module.kind != Kind::kText) {
          fail("STACK_GLOBAL needs two strings");
        }
        grow_tables(1);
        globals_.emplace_back(texts_[static_cast<size_t>(module.payload)],
                              texts_[static_cast<size_t>(name.payload)]);
        push(Value{Kind::kGlobal, static_cast<int64_t>(globals_.size() - 1)});
        return false;
      }
      case 'R':   // REDUCE: callable, args → result
      case 0x81:  // NEWOBJ: class, args → object
        pop();
        pop();
        push(Value{});
        return false;
      case 'b':  // BUILD: state applied to the object below it
        pop();
        top();
        return false;
      case 'Q':  // BINPERSID
        persistent_id();
        return false;
      default:
        fail("unknown opcode " + hex_byte(opcode_) +
             " (not one torch's Pickler or torch.save writes)");
    }
  }

  std::string_view pickle_;
  std::string_view name_;
  const Reporter& report_;
  std::function<void(const StorageClaim&)> on_storage_;
  size_t pos_ = 0;
  size_t op_start_ = 0;
  unsigned opcode_ = 0;
  uint64_t ops_ = 0;
  size_t table_entries_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
  std::vector<std::string_view> texts_;
  std::vector<std::pair<std::string_view, std::string_view>> globals_;
  std::vector<std::vector<Value>> tuples_;
};

}  // namespace

size_t storage_element_size(std::string_view type_module, std::string_view type_name) {
  if (type_module != "torch" && type_module.substr(0, 6) != "torch.") {
    return 0;
  }
  static const std::unordered_map<std::string_view, size_t> kSizes = {
      {"FloatStorage", 4},       {"DoubleStorage", 8},       {"HalfStorage", 2},
      {"BFloat16Storage", 2},    {"LongStorage", 8},         {"IntStorage", 4},
      {"ShortStorage", 2},       {"CharStorage", 1},         {"ByteStorage", 1},
      {"BoolStorage", 1},        {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16},
      {"ComplexHalfStorage", 4}, {"QInt8Storage", 1},        {"QUInt8Storage", 1},
      {"QInt32Storage", 4},      {"QUInt4x2Storage", 1},     {"QUInt2x4Storage", 1},
      {"UntypedStorage", 1},
  };
  const auto found = kSizes.find(type_name);
  return found == kSizes.end() ? 0 : found->second;
}

void scan_pickle(std::string_view pickle, std::string_view name, const Reporter& report,
                 const std::function<void(const StorageClaim&)>& on_storage) {
  PickleScanner(pickle, name, report, on_storage).run();
}

/// The folder holding the storages of pickle `name`, or nothing when the pickle is not one
/// libtorch reads. libtorch reads `<archive>/<stem>.pkl` and its storages from
/// `<archive>/<stem>/<key>` (data.pkl → data/, constants.pkl → constants/; torch.save writes
/// data.pkl and data/ the same way); a lite-interpreter bytecode.pkl shares constants/.
/// Deeper pickles (extra/*.pkl) are user files that need not be pickles at all.
std::optional<std::string> storage_folder_of(std::string_view name) {
  // TorchScript's source-range tables (code/**/*.debug_pkl) go through the same Unpickler
  // when the model loads, so they are scanned too; they declare no storages.
  constexpr std::string_view kDebugSuffix = ".debug_pkl";
  if (name.size() > kDebugSuffix.size() &&
      name.substr(name.size() - kDebugSuffix.size()) == kDebugSuffix) {
    return std::string(name) + "/";
  }
  constexpr std::string_view kSuffix = ".pkl";
  if (name.size() < kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix ||
      std::count(name.begin(), name.end(), '/') > 1) {
    return std::nullopt;
  }
  const size_t slash = name.rfind('/');
  const std::string_view folder = slash == std::string_view::npos ? "" : name.substr(0, slash + 1);
  std::string_view stem = name.substr(folder.size(), name.size() - folder.size() - kSuffix.size());
  if (stem == "bytecode") {
    stem = "constants";
  }
  return std::string(folder) + std::string(stem) + "/";
}

}  // namespace lithe::host::archive
