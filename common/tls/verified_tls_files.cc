#include "common/tls/verified_tls_files.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace llm::tls {

namespace {

namespace fs = std::filesystem;

// The set's files, in a fixed order, with the names their copies take.
struct Member {
  std::string TlsFiles::*path;
  const char* name;
  const char* key;
};
constexpr Member kMembers[] = {{&TlsFiles::cert_file, "cert.pem", "cert_file"},
                               {&TlsFiles::key_file, "key.pem", "key_file"},
                               {&TlsFiles::ca_file, "ca.pem", "ca_file"}};

absl::Status WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": cannot be written"));
  return absl::OkStatus();
}

// Every live set's directory, for ExitRemovingCopies. A directory is added when it is made and
// leaves when it is removed, both under the lock, so an exit never misses one being made.
std::mutex& LiveMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<std::string>& LiveDirectories() {
  static auto* dirs = new std::set<std::string>;
  return *dirs;
}

}  // namespace

void VerifiedTlsFiles::ExitRemovingCopies(int code) {
  LiveMutex().lock();  // never released: no set is made or removed after this
  for (const std::string& dir : LiveDirectories()) {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::_Exit(code);
}

absl::StatusOr<std::unique_ptr<VerifiedTlsFiles>> VerifiedTlsFiles::Start(
    const TlsFiles& files, const std::string& key_prefix, Check check, std::string program) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/llm-tls-XXXXXX");
  {
    std::lock_guard<std::mutex> lock(LiveMutex());
    if (::mkdtemp(pattern.data()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot make a private directory for the TLS files under ",
          pattern.substr(0, pattern.size() - 15), " (set TMPDIR to a writable directory)"));
    }
    LiveDirectories().insert(pattern);
  }
  std::unique_ptr<VerifiedTlsFiles> v(
      new VerifiedTlsFiles(files, key_prefix, std::move(check), std::move(program), pattern));
  if (absl::Status st = v->Refresh(); !st.ok()) return st;  // the first set must pass
  v->watcher_ = std::make_unique<PeriodicThread>(
      "tls-reload", std::chrono::seconds(files.reload_seconds > 0 ? files.reload_seconds : 1),
      [raw = v.get()] { raw->WatchTick(); });
  return v;
}

VerifiedTlsFiles::VerifiedTlsFiles(TlsFiles files, std::string key_prefix, Check check,
                                   std::string program, std::string dir)
    : files_(std::move(files)),
      key_prefix_(std::move(key_prefix)),
      check_(std::move(check)),
      program_(std::move(program)),
      dir_(std::move(dir)),
      copies_(files_) {
  for (const Member& m : kMembers) {
    if (!(files_.*m.path).empty()) copies_.*m.path = (fs::path(dir_) / m.name).string();
  }
}

VerifiedTlsFiles::~VerifiedTlsFiles() {
  if (watcher_) watcher_->Stop();
  std::lock_guard<std::mutex> lock(LiveMutex());
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
  LiveDirectories().erase(dir_);
}

void VerifiedTlsFiles::WatchTick() {
  if (absl::Status st = Refresh(); !st.ok()) {
    std::fprintf(stderr, "%s: keeping the old TLS files: %s\n", program_.c_str(),
                 std::string(st.message()).c_str());
  }
}

absl::Status VerifiedTlsFiles::Refresh() {
  // Read the whole set first: one change is one candidate, however many files it touched.
  std::vector<std::string> contents;
  std::string all;
  for (const Member& m : kMembers) {
    std::string bytes;
    const std::string& path = files_.*m.path;
    if (!path.empty()) {
      if (absl::Status st = ReadFile(path, absl::StrCat(key_prefix_, ".", m.key), &bytes);
          !st.ok()) {
        if (seen_ == "unreadable") return absl::OkStatus();  // said once
        seen_ = "unreadable";
        return st;
      }
    }
    absl::StrAppend(&all, bytes.size(), ":", bytes);
    contents.push_back(std::move(bytes));
  }
  if (all == seen_) return absl::OkStatus();
  // `seen_` moves on once the set is installed or refused by its check; an I/O failure here (a
  // full TMPDIR) leaves it, so the next period tries again.
  // The candidate in its own directory, checked where gRPC will read it.
  // Writing into dir_ excludes ExitRemovingCopies (which removes it and never lets go), so an
  // exit during a refresh leaves no half-written set behind.
  std::lock_guard<std::mutex> live(LiveMutex());
  const fs::path version = fs::path(dir_) / absl::StrCat("v", version_ + 1);
  std::error_code ec;
  fs::create_directory(version, ec);
  if (ec) return absl::InternalError(absl::StrCat(version.string(), ": ", ec.message()));
  TlsFiles candidate = files_;
  for (size_t i = 0; i < std::size(kMembers); ++i) {
    const Member& m = kMembers[i];
    if ((files_.*m.path).empty()) continue;
    const fs::path path = version / m.name;
    if (absl::Status st = WriteFile(path, contents[i]); !st.ok()) {
      fs::remove_all(version, ec);
      return st;
    }
    candidate.*m.path = path.string();
  }
  absl::Status st = check_(candidate);
  if (!st.ok()) {
    seen_ = all;  // said once per change
    fs::remove_all(version, ec);
    // Name the operator's files, not the candidate's copies.
    std::string message(st.message());
    for (const Member& m : kMembers) {
      if (!(files_.*m.path).empty()) {
        message = absl::StrReplaceAll(message, {{candidate.*m.path, files_.*m.path}});
      }
    }
    return absl::Status(st.code(), message);
  }
  // Swap: ..data -> vN+1 by renaming a new symlink over it (atomic), then the stable names.
  const fs::path data = fs::path(dir_) / "..data", next = fs::path(dir_) / "..data.next";
  fs::remove(next, ec);
  fs::create_directory_symlink(version.filename(), next, ec);
  if (!ec) fs::rename(next, data, ec);
  if (ec) return absl::InternalError(absl::StrCat(data.string(), ": ", ec.message()));
  for (const Member& m : kMembers) {
    if ((files_.*m.path).empty()) continue;
    const fs::path link = fs::path(dir_) / m.name;
    if (!fs::is_symlink(link)) fs::create_symlink(fs::path("..data") / m.name, link, ec);
    if (ec) return absl::InternalError(absl::StrCat(link.string(), ": ", ec.message()));
  }
  if (version_ > 0) fs::remove_all(fs::path(dir_) / absl::StrCat("v", version_), ec);
  ++version_;
  seen_ = all;
  return absl::OkStatus();
}

}  // namespace llm::tls
