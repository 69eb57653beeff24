#include "lithe/host/export/onnx_runtime.h"

#include <ATen/ATen.h>
#include <dlfcn.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "lithe/host/io/shared_object_check.h"
#include "lithe/sdk/error.h"

namespace lithe::host {

namespace fs = std::filesystem;

namespace {

// ONNX Runtime's C API is one struct of function pointers (OrtApi) that every release only
// appends to, so a member's position is fixed from the release that added it. Lithe ships no
// ORT header: it reads the members it calls by position, typed by their documented signatures
// (handles as void*, OrtStatus* as void*: null is success).
enum ApiMember : size_t {
  kGetErrorMessage = 2,
  kCreateEnv = 3,
  kCreateSessionFromArray = 8,
  kRun = 9,
  kCreateSessionOptions = 10,
  kSetIntraOpNumThreads = 24,
  kSetInterOpNumThreads = 25,
  kCreateTensorWithDataAsOrtValue = 49,
  kGetTensorMutableData = 51,
  kGetTensorElementType = 60,
  kGetDimensionsCount = 61,
  kGetDimensions = 62,
  kGetTensorTypeAndShape = 65,
  kCreateCpuMemoryInfo = 69,
  kReleaseEnv = 92,
  kReleaseStatus = 93,
  kReleaseMemoryInfo = 94,
  kReleaseSession = 95,
  kReleaseValue = 96,
  kReleaseTensorTypeAndShapeInfo = 99,
  kReleaseSessionOptions = 100,
};

constexpr uint32_t kApiVersion = 1;         // every ORT 1.x offers it
constexpr int kLogErrorsOnly = 3;           // ORT_LOGGING_LEVEL_ERROR
constexpr int kElementFloat = 1;            // ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
constexpr int kArenaAllocator = 1;          // OrtArenaAllocator
constexpr int kMemTypeDefault = 0;          // OrtMemTypeDefault

struct ApiBase {  // OrtApiBase
  const void* (*get_api)(uint32_t version) noexcept;
  const char* (*get_version_string)() noexcept;
};

using AnyFunction = void (*)();

// One loaded library: its API table and the process's ORT environment (ORT wants one).
}  // namespace

// Named, not anonymous: OnnxRuntimeSession::State (declared in the public header) holds a
// Library, and a class with external linkage may not hold a type of an anonymous namespace once
// this file shares a translation unit with others (unity builds; -Wsubobject-linkage).
namespace onnx_runtime_detail {
struct Library {
  const AnyFunction* api = nullptr;
  void* env = nullptr;
  std::string path;
  std::string version;

  template <typename Signature>
  Signature fn(ApiMember member) const {
    return reinterpret_cast<Signature>(api[member]);
  }

  // Throws with ORT's message when `status` is an error (and releases it).
  void check(void* status, const std::string& what) const {
    if (status == nullptr) {
      return;
    }
    const std::string message = fn<const char* (*)(const void*)>(kGetErrorMessage)(status);
    fn<void (*)(void*)>(kReleaseStatus)(status);
    throw sdk::Error(sdk::Errc::kUnsupported, "ONNX Runtime " + version + " (" + path + ") " +
                                                  what + ": " + sdk::printable(message, 2000));
  }
};
}  // namespace onnx_runtime_detail
using onnx_runtime_detail::Library;

namespace {

std::mutex libraries_mutex;

// Libraries by canonical path, never unloaded (see the header).
std::map<fs::path, Library>& libraries() {
  static auto* loaded = new std::map<fs::path, Library>();
  return *loaded;
}

const Library& open_library(const fs::path& path, const std::string& option) {
  const auto refuse = [&](const std::string& problem) {
    return sdk::Error(sdk::Errc::kInvalidConfig,
                      option + " " + path.string() + ": " + problem +
                          " (it must name ONNX Runtime's shared library, libonnxruntime.so)");
  };
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw refuse(ec && ec != std::errc::no_such_file_or_directory ? ec.message()
                                                                   : "no such file");
  }
  if (!fs::is_regular_file(status)) {
    throw refuse("not a regular file");
  }
  const fs::path canonical = fs::canonical(path, ec);
  if (ec) {
    throw refuse("cannot resolve it: " + ec.message());
  }
  std::lock_guard<std::mutex> lock(libraries_mutex);
  if (const auto it = libraries().find(canonical); it != libraries().end()) {
    return it->second;
  }
  if (!insecure_libraries_allowed()) {  // as the plugin loader asks of a plugin
    if (const std::string problem = trust_problem(canonical, /*is_directory=*/false);
        !problem.empty()) {
      throw sdk::Error(sdk::Errc::kInvalidConfig,
                       untrusted_message(option + " " + path.string(), problem));
    }
  }
  if (const std::string problem = shared_object_problem(canonical); !problem.empty()) {
    throw refuse(problem);
  }
  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    throw refuse(std::string("dlopen failed: ") + (error != nullptr ? error : "unknown error"));
  }
  using GetApiBase = const ApiBase* (*)();
  const auto get_api_base = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"));
  if (get_api_base == nullptr) {
    dlclose(handle);  // not ORT: none of its threads exist yet
    throw refuse("it exports no OrtGetApiBase");
  }
  const ApiBase* base = get_api_base();
  const void* api = base != nullptr ? base->get_api(kApiVersion) : nullptr;
  if (api == nullptr) {
    throw refuse("it does not offer ONNX Runtime's C API version " +
                 std::to_string(kApiVersion));
  }
  Library library;
  library.api = static_cast<const AnyFunction*>(api);
  library.path = canonical.string();
  const char* version = base->get_version_string();
  library.version = version != nullptr ? version : "(no version)";
  library.check(library.fn<void* (*)(int, const char*, void**)>(kCreateEnv)(
                    kLogErrorsOnly, "lithe", &library.env),
                "could not create its environment");
  return libraries().emplace(canonical, std::move(library)).first->second;
}

}  // namespace

struct OnnxRuntimeSession::State {
  const Library* library = nullptr;
  void* session = nullptr;
  void* memory = nullptr;
};

std::string OnnxRuntimeSession::load_library(const fs::path& library,
                                             const std::string& option) {
  return open_library(library, option).version;
}

OnnxRuntimeSession::OnnxRuntimeSession(const fs::path& library, const std::string& option,
                                       const std::string& onnx_bytes, int threads)
    : state_(std::make_unique<State>()) {
  const Library& ort = open_library(library, option);
  state_->library = &ort;
  void* options = nullptr;
  ort.check(ort.fn<void* (*)(void**)>(kCreateSessionOptions)(&options),
            "could not create session options");
  try {
    ort.check(ort.fn<void* (*)(void*, int)>(kSetIntraOpNumThreads)(options, threads),
              "refused " + std::to_string(threads) + " intra-op threads");
    ort.check(ort.fn<void* (*)(void*, int)>(kSetInterOpNumThreads)(options, 1),
              "refused one inter-op thread");
    ort.check(ort.fn<void* (*)(const void*, const void*, size_t, const void*, void**)>(
                  kCreateSessionFromArray)(ort.env, onnx_bytes.data(), onnx_bytes.size(),
                                           options, &state_->session),
              "could not load the ONNX model");
    ort.check(ort.fn<void* (*)(int, int, void**)>(kCreateCpuMemoryInfo)(
                  kArenaAllocator, kMemTypeDefault, &state_->memory),
              "could not describe CPU memory");
  } catch (...) {
    ort.fn<void (*)(void*)>(kReleaseSessionOptions)(options);
    if (state_->session != nullptr) {
      ort.fn<void (*)(void*)>(kReleaseSession)(state_->session);
    }
    throw;
  }
  ort.fn<void (*)(void*)>(kReleaseSessionOptions)(options);
}

OnnxRuntimeSession::~OnnxRuntimeSession() {
  const Library& ort = *state_->library;
  if (state_->memory != nullptr) {
    ort.fn<void (*)(void*)>(kReleaseMemoryInfo)(state_->memory);
  }
  ort.fn<void (*)(void*)>(kReleaseSession)(state_->session);
}

const std::string& OnnxRuntimeSession::version() const { return state_->library->version; }

at::Tensor OnnxRuntimeSession::run(const at::Tensor& input) {
  const Library& ort = *state_->library;
  at::Tensor x = input.to(at::kFloat).contiguous();
  const std::vector<int64_t> shape = x.sizes().vec();
  void* input_value = nullptr;
  ort.check(ort.fn<void* (*)(const void*, void*, size_t, const int64_t*, size_t, int, void**)>(
                kCreateTensorWithDataAsOrtValue)(state_->memory, x.data_ptr(),
                                                 static_cast<size_t>(x.nbytes()), shape.data(),
                                                 shape.size(), kElementFloat, &input_value),
            "could not wrap the input");
  const char* input_name = "input";
  const char* output_name = "output";
  void* output_value = nullptr;
  // Everything ORT hands back is released on every path, the error paths included.
  void* info = nullptr;
  const auto release = [&] {
    if (info != nullptr) {
      ort.fn<void (*)(void*)>(kReleaseTensorTypeAndShapeInfo)(info);
    }
    if (output_value != nullptr) {
      ort.fn<void (*)(void*)>(kReleaseValue)(output_value);
    }
    ort.fn<void (*)(void*)>(kReleaseValue)(input_value);
  };
  try {
    const void* inputs[] = {input_value};
    ort.check(ort.fn<void* (*)(void*, const void*, const char* const*, const void* const*, size_t,
                               const char* const*, size_t, void**)>(kRun)(
                  state_->session, nullptr, &input_name, inputs, 1, &output_name, 1,
                  &output_value),
              "could not run the model");
    ort.check(ort.fn<void* (*)(const void*, void**)>(kGetTensorTypeAndShape)(output_value, &info),
              "could not read the output's type");
    int element_type = 0;
    size_t rank = 0;
    ort.check(ort.fn<void* (*)(const void*, int*)>(kGetTensorElementType)(info, &element_type),
              "could not read the output's element type");
    LITHE_CHECK(element_type == kElementFloat, sdk::Errc::kUnsupported, "ONNX Runtime ",
                ort.version, ": the model's output has ONNX element type ", element_type,
                ", not float32 (1)");
    ort.check(ort.fn<void* (*)(const void*, size_t*)>(kGetDimensionsCount)(info, &rank),
              "could not read the output's rank");
    std::vector<int64_t> dims(rank);
    ort.check(ort.fn<void* (*)(const void*, int64_t*, size_t)>(kGetDimensions)(info, dims.data(),
                                                                               rank),
              "could not read the output's shape");
    void* data = nullptr;
    ort.check(ort.fn<void* (*)(void*, void**)>(kGetTensorMutableData)(output_value, &data),
              "could not read the output");
    at::Tensor out = at::from_blob(data, dims, at::kFloat).clone();
    release();
    return out;
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace lithe::host
