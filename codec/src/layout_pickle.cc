// A small pickle reader for torch's data.pkl: it runs the opcodes (protocols
// 0..5) only far enough to see the persistent ids of storages,
//   ('storage', torch.<X>Storage, key, location, numel),
// and maps each key to the storage's element type. Every other value is an
// opaque placeholder. Values are shared, so memo copies cost nothing.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "layout_internal.h"
#include "lmc/bytes.h"

namespace lmc::layout {
namespace {

struct Value {
  enum Kind { kOther, kStr, kInt, kTuple, kGlobal } kind = kOther;
  int64_t num = 0;                                  // kInt
  std::string str;                                  // kStr: the text; kGlobal: "module.name"
  std::vector<std::shared_ptr<const Value>> items;  // kTuple
  int depth = 0;  // tuple nesting, bounded so that destruction cannot recurse deeply
};
using ValuePtr = std::shared_ptr<const Value>;

// Bounds against hostile input (the pickle itself is at most kHeaderCap).
constexpr size_t kMaxStack = size_t{1} << 20;
constexpr size_t kMaxMemo = size_t{1} << 20;
constexpr int kMaxDepth = 32;

// Element type of a torch storage class; kBytes for UntypedStorage (whose
// persistent id counts bytes); nullopt for anything else.
std::optional<DType> StorageDType(std::string_view global) {
  if (global.substr(0, 6) != "torch.") return std::nullopt;
  std::string_view name = global.substr(global.rfind('.') + 1);
  if (name == "UntypedStorage") return DType::kBytes;
  struct Entry {
    std::string_view name;
    DType t;
  };
  static constexpr Entry kMap[] = {
      {"FloatStorage", DType::kF32},
      {"BFloat16Storage", DType::kBF16},
      {"HalfStorage", DType::kF16},
      {"DoubleStorage", DType::kF64},
      {"LongStorage", DType::kI64},
      {"IntStorage", DType::kI32},
      {"ShortStorage", DType::kI16},
      {"CharStorage", DType::kI8},
      {"ByteStorage", DType::kU8},
      {"BoolStorage", DType::kBool},
      {"Float8_e4m3fnStorage", DType::kF8E4M3},
      {"Float8_e5m2Storage", DType::kF8E5M2},
  };
  for (const auto& e : kMap)
    if (e.name == name) return e.t;
  return std::nullopt;  // UntypedStorage and friends: the caller detects
}

class PickleMachine {
 public:
  explicit PickleMachine(std::string_view p) : p_(p) {}

  TorchStorages Run() {
    while (i_ < p_.size()) {
      if (!Step()) break;
    }
    return std::move(storages_);
  }

 private:
  bool Take(size_t n, std::string_view* out) {
    if (p_.size() - i_ < n) return false;
    *out = p_.substr(i_, n);
    i_ += n;
    return true;
  }
  bool TakeInt(size_t width, uint64_t* v) {
    std::string_view s;
    if (!Take(width, &s)) return false;
    *v = LoadLEBytes(s.data(), width);
    return true;
  }
  bool Line(std::string_view* out) {
    size_t nl = p_.find('\n', i_);
    if (nl == std::string_view::npos) return false;
    *out = p_.substr(i_, nl - i_);
    i_ = nl + 1;
    return true;
  }
  bool Push(ValuePtr v) {
    if (stack_.size() >= kMaxStack) return false;
    stack_.push_back(std::move(v));
    return true;
  }
  bool PushOther() { return Push(other_); }
  bool PushInt(int64_t n) {
    auto v = std::make_shared<Value>();
    v->kind = Value::kInt;
    v->num = n;
    return Push(std::move(v));
  }
  // Little-endian two's complement of `s.size()` bytes (LONG1, BININT*).
  bool PushSigned(std::string_view s) {
    if (s.empty() || s.size() > 8) return PushOther();
    uint64_t u = LoadLEBytes(s.data(), s.size());
    if (s.size() < 8 && (u >> (8 * s.size() - 1)) & 1) u |= ~uint64_t{0} << (8 * s.size());
    return PushInt(static_cast<int64_t>(u));
  }
  bool PushStr(std::string_view s) {
    auto v = std::make_shared<Value>();
    v->kind = Value::kStr;
    v->str = std::string(s);
    return Push(std::move(v));
  }
  bool Pop(ValuePtr* v = nullptr) {
    if (stack_.size() <= floor()) return false;
    if (v) *v = std::move(stack_.back());
    stack_.pop_back();
    return true;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops everything above the topmost mark, and the mark.
  bool PopMark(std::vector<ValuePtr>* items) {
    if (marks_.empty()) return false;
    size_t m = marks_.back();
    marks_.pop_back();
    if (items) items->assign(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return true;
  }
  bool PushTuple(std::vector<ValuePtr> items) {
    int depth = 0;
    for (const auto& item : items) depth = std::max(depth, item->depth);
    if (depth >= kMaxDepth) return PushOther();  // deeper than any persistent id
    auto v = std::make_shared<Value>();
    v->kind = Value::kTuple;
    v->depth = depth + 1;
    v->items = std::move(items);
    return Push(std::move(v));
  }
  bool TupleN(size_t n) {
    if (stack_.size() < floor() + n) return false;
    std::vector<ValuePtr> items(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return PushTuple(std::move(items));
  }
  bool PopN(size_t n) {
    for (size_t k = 0; k < n; ++k)
      if (!Pop()) return false;
    return true;
  }
  bool Put(uint64_t idx) {
    if (stack_.size() <= floor()) return false;
    if (memo_.size() >= kMaxMemo && !memo_.count(idx)) return false;
    memo_[idx] = stack_.back();
    return true;
  }
  bool Get(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) return false;
    return Push(it->second);
  }
  bool Global(std::string module, std::string_view name) {
    auto v = std::make_shared<Value>();
    v->kind = Value::kGlobal;
    v->str = std::move(module);
    v->str += '.';
    v->str += name;
    return Push(std::move(v));
  }
  bool ParseDecimal(std::string_view s, uint64_t* v) {
    *v = 0;
    if (s.empty() || s.size() > 18) return false;
    for (char ch : s) {
      if (ch < '0' || ch > '9') return false;
      *v = *v * 10 + static_cast<uint64_t>(ch - '0');
    }
    return true;
  }
  void PersistentId(const ValuePtr& pid) {
    if (pid->kind != Value::kTuple || pid->items.size() < 3) return;
    const auto& it = pid->items;
    if (it[0]->kind != Value::kStr || it[0]->str != "storage") return;
    if (it[1]->kind != Value::kGlobal || it[2]->kind != Value::kStr) return;
    StorageInfo info;
    if (auto t = StorageDType(it[1]->str)) {
      info.dtype = *t;
      info.typed = *t != DType::kBytes;
      if (it.size() >= 5 && it[4]->kind == Value::kInt && it[4]->num >= 0 &&
          static_cast<uint64_t>(it[4]->num) <= kMaxExtent) {
        info.nbytes = static_cast<uint64_t>(it[4]->num) * DTypeWidth(*t);
        info.sized = true;
      }
    }
    storages_[it[2]->str] = info;
  }

  // Executes one opcode; false stops the machine (STOP, unknown or malformed).
  bool Step() {
    uint8_t op = static_cast<uint8_t>(p_[i_++]);
    std::string_view s;
    uint64_t n = 0;
    switch (op) {
      case 0x80:  // PROTO
        return Take(1, &s);
      case 0x95:  // FRAME
        return Take(8, &s);
      case '.':  // STOP
        return false;
      case '(':  // MARK
        if (marks_.size() >= kMaxStack) return false;
        marks_.push_back(stack_.size());
        return true;
      case '0':  // POP
        return Pop();
      case '1':  // POP_MARK
        return PopMark(nullptr);
      case '2':  // DUP
        if (stack_.size() <= floor()) return false;
        return Push(stack_.back());
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
      case ')':   // EMPTY_TUPLE handled below
        if (op == ')') return PushTuple({});
        return PushOther();
      case 'K':  // BININT1 (unsigned)
      case 'M':  // BININT2 (unsigned)
        if (!TakeInt(op == 'K' ? 1 : 2, &n)) return false;
        return PushInt(static_cast<int64_t>(n));
      case 'J':  // BININT (signed)
        if (!Take(4, &s)) return false;
        return PushSigned(s);
      case 0x8a:  // LONG1
        if (!TakeInt(1, &n) || !Take(n, &s)) return false;
        return PushSigned(s);
      case 0x8b:  // LONG4
        if (!TakeInt(4, &n) || !Take(n, &s)) return false;
        return PushOther();
      case 'I':  // INT
      case 'L':  // LONG
      case 'F':  // FLOAT
        if (!Line(&s)) return false;
        return PushOther();
      case 'G':  // BINFLOAT
        if (!Take(8, &s)) return false;
        return PushOther();
      case 'X':  // BINUNICODE
      case 'T':  // BINSTRING
        if (!TakeInt(4, &n) || !Take(n, &s)) return false;
        return PushStr(s);
      case 0x8c:  // SHORT_BINUNICODE
      case 'U':   // SHORT_BINSTRING
        if (!TakeInt(1, &n) || !Take(n, &s)) return false;
        return PushStr(s);
      case 0x8d:  // BINUNICODE8
        if (!TakeInt(8, &n) || !Take(n, &s)) return false;
        return PushStr(s);
      case 'V':  // UNICODE (raw-unicode-escape; storage keys are plain ASCII)
        if (!Line(&s)) return false;
        return PushStr(s);
      case 'S':  // STRING: a quoted repr
        if (!Line(&s)) return false;
        if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front())
          s = s.substr(1, s.size() - 2);
        return PushStr(s);
      case 'B':  // BINBYTES
        if (!TakeInt(4, &n) || !Take(n, &s)) return false;
        return PushOther();
      case 'C':  // SHORT_BINBYTES
        if (!TakeInt(1, &n) || !Take(n, &s)) return false;
        return PushOther();
      case 0x8e:  // BINBYTES8
      case 0x96:  // BYTEARRAY8
        if (!TakeInt(8, &n) || !Take(n, &s)) return false;
        return PushOther();
      case 't': {  // TUPLE
        std::vector<ValuePtr> items;
        if (!PopMark(&items)) return false;
        return PushTuple(std::move(items));
      }
      case 0x85:  // TUPLE1
      case 0x86:  // TUPLE2
      case 0x87:  // TUPLE3
        return TupleN(op - 0x84u);
      case ']':   // EMPTY_LIST
      case '}':   // EMPTY_DICT
      case 0x8f:  // EMPTY_SET
        return PushOther();
      case 'l':   // LIST
      case 'd':   // DICT
      case 0x91:  // FROZENSET
        return PopMark(nullptr) && PushOther();
      case 'a':  // APPEND
        return Pop();
      case 's':  // SETITEM
        return PopN(2);
      case 'e':   // APPENDS
      case 'u':   // SETITEMS
      case 0x90:  // ADDITEMS
        return PopMark(nullptr) && stack_.size() > floor();
      case 'c': {  // GLOBAL "module\nname\n"
        std::string_view module, name;
        if (!Line(&module) || !Line(&name)) return false;
        return Global(std::string(module), name);
      }
      case 0x93: {  // STACK_GLOBAL
        ValuePtr name, module;
        if (!Pop(&name) || !Pop(&module)) return false;
        if (name->kind != Value::kStr || module->kind != Value::kStr) return PushOther();
        return Global(module->str, name->str);
      }
      case 'R':  // REDUCE: callable, args -> object
        return PopN(2) && PushOther();
      case 'b':  // BUILD: object, state -> object
        return Pop() && stack_.size() > floor();
      case 0x81:  // NEWOBJ
        return PopN(2) && PushOther();
      case 0x92:  // NEWOBJ_EX
        return PopN(3) && PushOther();
      case 'i': {  // INST: mark args..., "module\nname\n" -> object
        std::string_view module, name;
        if (!Line(&module) || !Line(&name)) return false;
        return PopMark(nullptr) && PushOther();
      }
      case 'o':  // OBJ: mark class args... -> object
        return PopMark(nullptr) && PushOther();
      case 'Q': {  // BINPERSID
        ValuePtr pid;
        if (!Pop(&pid)) return false;
        PersistentId(pid);
        return PushOther();
      }
      case 'P':  // PERSID
        if (!Line(&s)) return false;
        return PushOther();
      case 'p':  // PUT
        if (!Line(&s) || !ParseDecimal(s, &n)) return false;
        return Put(n);
      case 'q':  // BINPUT
        return TakeInt(1, &n) && Put(n);
      case 'r':  // LONG_BINPUT
        return TakeInt(4, &n) && Put(n);
      case 0x94:  // MEMOIZE
        return Put(memo_.size());
      case 'g':  // GET
        if (!Line(&s) || !ParseDecimal(s, &n)) return false;
        return Get(n);
      case 'h':  // BINGET
        return TakeInt(1, &n) && Get(n);
      case 'j':  // LONG_BINGET
        return TakeInt(4, &n) && Get(n);
      case 0x82:  // EXT1
      case 0x83:  // EXT2
      case 0x84:  // EXT4
        if (!Take(op == 0x82 ? 1 : op == 0x83 ? 2 : 4, &s)) return false;
        return PushOther();
      case 0x97:  // NEXT_BUFFER
        return PushOther();
      case 0x98:  // READONLY_BUFFER
        return stack_.size() > floor();
      default:
        return false;
    }
  }

  std::string_view p_;
  size_t i_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, ValuePtr> memo_;
  TorchStorages storages_;
  const ValuePtr other_ = std::make_shared<Value>();
};

}  // namespace

TorchStorages ReadTorchPickle(std::string_view pkl) {
  try {
    return PickleMachine(pkl).Run();
  } catch (...) {
    return {};
  }
}

}  // namespace lmc::layout
