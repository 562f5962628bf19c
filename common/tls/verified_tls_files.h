// TLS files as gRPC's file-watcher certificate provider should see them: private copies that
// change only to a set that passed its checks.
//
// gRPC reads the configured paths as they are. A file caught half-written (a `cp` or a shell
// redirect over it) or a rotation caught between its certificate and its key made it abort the
// process (an empty certificate trips an assertion) or refuse every new handshake. So the
// operator's files are watched here instead: every TlsFiles::reload_seconds they are read, and
// when they changed, the new set is written to a new version directory, checked there (the same
// Check*Files as at start), and swapped in by renaming one symlink, as kubelet updates a
// Secret volume; gRPC then sees the whole new set or none of it. A set that fails its check is
// not installed: the old one stays, and the reason is logged once per change, naming the key
// and the operator's file.
#ifndef LLM_COMMON_TLS_VERIFIED_TLS_FILES_H_
#define LLM_COMMON_TLS_VERIFIED_TLS_FILES_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/periodic_thread.h"
#include "common/tls/tls_files.h"

namespace llm::tls {

class VerifiedTlsFiles {
 public:
  using Check = std::function<absl::Status(const TlsFiles&)>;

  // Copies `files` (its non-empty paths) into a new private directory under $TMPDIR (else
  // /tmp), checks the copies with `check` (errors name the operator's paths; `key_prefix`,
  // "tls" or "upstream_tls", names the keys of files that cannot be read), and starts watching.
  // `program` prefixes the log lines ("llm-worker").
  static absl::StatusOr<std::unique_ptr<VerifiedTlsFiles>> Start(const TlsFiles& files,
                                                                 const std::string& key_prefix,
                                                                 Check check, std::string program);
  // Stops watching and removes the copies.
  ~VerifiedTlsFiles();

  // Ends the process at once (std::_Exit(code): no destructor runs), first removing every live
  // set's copies, which the destructor would have removed. For a process that must not wait:
  // a signal while the model loads, or a second signal during a drain.
  [[noreturn]] static void ExitRemovingCopies(int code);

  // `files` with each path replaced by its copy's: what gRPC is given.
  const TlsFiles& copies() const { return copies_; }
  // Reads the operator's files now and installs them when they changed and pass (the watcher
  // does this every reload_seconds). OK when nothing changed or the new set is installed; else
  // why it was not.
  absl::Status Refresh();

 private:
  VerifiedTlsFiles(TlsFiles files, std::string key_prefix, Check check, std::string program,
                   std::string dir);
  // Every reload_seconds: Refresh(), logging why a changed set was not installed.
  void WatchTick();

  const TlsFiles files_;
  const std::string key_prefix_;
  const Check check_;
  const std::string program_;
  const std::string dir_;
  TlsFiles copies_;
  std::string seen_;  // the contents last read (installed or refused)
  int version_ = 0;   // of the installed set

  std::unique_ptr<PeriodicThread> watcher_;
};

}  // namespace llm::tls

#endif  // LLM_COMMON_TLS_VERIFIED_TLS_FILES_H_
