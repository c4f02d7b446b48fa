// Getting models from the Hugging Face Hub into the standard Hugging Face
// cache, so transformers, vLLM and Octet share one copy of every checkpoint.
//
// Cache layout (the one huggingface_hub writes):
//   <cache>/models--ORG--NAME/blobs/<sha256 of an LFS file, or the git blob id>
//   <cache>/models--ORG--NAME/snapshots/<commit>/<path> -> ../../blobs/<id>
//   <cache>/models--ORG--NAME/refs/<branch or tag>      (holds the commit)
// <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
//
// A blob is written to blobs/<id>.incomplete and renamed to blobs/<id> only
// after its size and checksum match what the Hub's file list promised
// (sha256 for LFS files, the git blob sha1 for the others): a partial or
// corrupt file is never linked into a snapshot. An .incomplete file is
// resumed with an HTTP Range request on the next attempt or the next run.
//
// HTTP conventions (huggingface.co and its mirrors):
//   GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true
//       -> {"sha": commit, "siblings": [{"rfilename", "size", "blobId",
//                                         "lfs": {"sha256", "size"}}]}
//   GET {endpoint}/{repo}/resolve/{commit}/{path}  (redirects followed; the
//       Authorization header is dropped when a redirect leaves the endpoint)
// Every request has a connect deadline and a per-read deadline; nothing waits
// forever on a stalled peer.
//
// Thread-safety: free functions; Pull runs its own worker threads and calls
// the progress callback from them, one call at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "octet/base/status.h"

namespace octet::app::hub {

// "ORG/NAME" or "ORG/NAME@REVISION" (branch, tag or 40-hex commit).
struct RepoRef {
  std::string repo;               // "Qwen/Qwen3-8B"
  std::string revision = "main";  // as the user named it
  std::string ToString() const { return revision == "main" ? repo : repo + "@" + revision; }
};

// Accepts ORG/NAME[@REV] with ORG and NAME made of [A-Za-z0-9._-], not
// starting with '.' or '-'. Anything else (a path like ./x or /x/y, a bare
// name) is an InvalidArgument error saying what a repo id looks like.
Result<RepoRef> ParseRepoRef(std::string_view text);
// True when `text` has the shape of a repo id (no file-system check).
bool LooksLikeRepoRef(std::string_view text);

// Where and how to reach the Hub; FromEnvironment reads HF_ENDPOINT,
// HF_HOME, HF_HUB_CACHE, HF_TOKEN (else HF_TOKEN_PATH or $HF_HOME/token) and
// HF_HUB_OFFLINE.
struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // no trailing slash
  std::string cache_dir;                            // the hub cache (see above)
  std::string token;                                // empty: anonymous
  std::string token_source;                         // "HF_TOKEN", a file path, or ""
  bool offline = false;
  int connect_timeout_ms = 10'000;
  int read_timeout_ms = 30'000;  // the longest wait for one read of a response

  static HubConfig FromEnvironment();
};

// "models--ORG--NAME"
std::string RepoFolderName(std::string_view repo);
std::string RepoCacheDir(const HubConfig& c, std::string_view repo);

// One file of a revision, as the Hub's file list describes it.
struct HubFile {
  std::string path;     // rfilename: "model-00001-of-00004.safetensors"
  int64_t size = -1;    // bytes; -1 when the Hub did not say
  std::string sha256;   // LFS files: lowercase hex; empty otherwise
  std::string blob_id;  // the git blob id (sha1 of "blob <size>\0" + bytes)
  // The blob's name in the cache: the sha256 for LFS files, else the git id.
  std::string BlobName() const { return sha256.empty() ? blob_id : sha256; }
};

struct RepoInfo {
  RepoRef ref;
  std::string commit;  // the revision resolved to a commit by the Hub
  std::vector<HubFile> files;
};

// The file list of a revision (the model info API). 401/403 give an
// Unauthenticated/PermissionDenied error that names the repo and says to
// accept its licence on the Hub and set HF_TOKEN; 404 a NotFound error.
Result<RepoInfo> FetchRepoInfo(const HubConfig& c, const RepoRef& ref);

// One small file of a revision (config.json, hf_quant_config.json) read into
// memory, not into the cache: what planning needs before a download. At most
// 64 MiB; HTTP errors as FetchRepoInfo's.
Result<std::string> FetchSmallFile(const HubConfig& c, const RepoInfo& info,
                                   const std::string& path);

// Progress of a pull. Bytes are what is on disk for the files being pulled
// (resumed bytes count as done from the start); the rate counts bytes that
// crossed the network in this run only.
struct FileProgress {
  std::string path;
  int64_t done = 0;
  int64_t total = 0;
  double bytes_per_s = 0;
};
struct PullProgress {
  enum class Event { kTick, kFileStarted, kFileDone, kFileRetry, kFileCached };
  Event event = Event::kTick;
  FileProgress file;                 // the file the event is about (kTick: unused)
  std::string detail;                // kFileRetry: why; kFileDone: "verified sha256"
  std::vector<FileProgress> active;  // files in flight, for a live display
  int files_done = 0, files_total = 0;
  int64_t bytes_done = 0, bytes_total = 0;
  double bytes_per_s = 0;  // over the whole run
  double eta_s = -1;       // -1: unknown
};

// Instead of the Hub: where the file list and the bytes come from (another
// node's copy: `octet pull --from-peer`). Checksums, resume, verification and
// the cache layout are the same as for a Hub download.
struct PullSource {
  std::string name;  // for messages: "peer 10.0.0.2:47100"
  std::function<Result<RepoInfo>(const RepoRef&)> info;
  // Streams f's bytes from `offset` to on_data (an error from it aborts).
  std::function<Status(const HubFile& f, int64_t offset,
                       const std::function<Status(const char*, size_t)>& on_data)>
      read;
};

struct PullOptions {
  std::vector<std::string> include;           // fnmatch globs ('*' crosses '/'); empty: all files
  int jobs = 4;                               // files downloaded at once
  int attempts = 5;                           // per file, counting the first; resumed with Range
  int retry_backoff_ms = 500;                 // doubled after each failed attempt
  bool verify_cached = true;                  // re-hash blobs already in the cache
  const std::atomic<bool>* cancel = nullptr;  // set: stop soon, keep partial files
  std::function<void(const PullProgress&)> progress;  // at most every ~200 ms + events
  const PullSource* source = nullptr;                 // set: not the Hub
};

struct PulledFile {
  HubFile file;
  bool downloaded = false;    // fetched (fully or resumed) in this run
  int64_t network_bytes = 0;  // bytes received for it in this run
};
struct PullResult {
  RepoRef ref;
  std::string commit;
  std::string snapshot_dir;  // what --model resolves to
  bool offline = false;      // resolved from the cache only (HF_HUB_OFFLINE)
  std::vector<PulledFile> files;
  int64_t bytes_total = 0;
  int64_t network_bytes = 0;
  double seconds = 0;
};

// Downloads the files of a revision (those matching `include`) into the
// cache, verifies each, links the snapshot and writes refs/<rev>. Files
// already verified in the cache are not fetched again. Offline: resolves from
// the cache only. A cancelled pull returns a Cancelled error and leaves the
// .incomplete files for the next run.
Result<PullResult> Pull(const HubConfig& c, const RepoRef& ref, const PullOptions& o);

// The local snapshot folder of ref (refs/<rev> -> snapshots/<commit>, or the
// commit itself), without any network access. NotFound says the model is not
// pulled yet and how to pull it.
Result<std::string> ResolveSnapshot(const HubConfig& c, const RepoRef& ref);

// A model in the cache: one entry per snapshot.
struct LocalModel {
  std::string repo;
  std::string commit;
  std::vector<std::string> refs;  // branches/tags pointing at this commit
  std::string snapshot_dir;
  int files = 0;
  int64_t bytes = 0;         // sum of the linked blobs' sizes
  int64_t repo_bytes = 0;    // all blobs of the repo (shared by snapshots)
  int incomplete_files = 0;  // blobs/*.incomplete: an interrupted pull
  int missing_files = 0;     // links whose blob is gone
};
Result<std::vector<LocalModel>> ListLocalModels(const HubConfig& c);

// Removes models--ORG--NAME (every snapshot and blob of the repo). NotFound
// when it is not in the cache.
Status RemoveLocalModel(const HubConfig& c, std::string_view repo);

// Lowercase hex digests of a whole file: sha256, or the git blob id
// (sha1 over "blob <size>\0" followed by the bytes).
Result<std::string> FileSha256(const std::string& path);
Result<std::string> FileGitBlobId(const std::string& path);

}  // namespace octet::app::hub
