// Writing what the user names with -o, without ever deleting or replacing what kiln did not write.
//
//  * -o FILE (writeOutputFile): a regular file, or a path that does not exist yet, is replaced atomically
//    (a temporary `.NAME.kiln-tmp-PID-N` next to it, renamed into place; a replaced file keeps its mode).
//    Anything else is written through, as a shell's `>` would: a FIFO, a character device, a symlink's target
//    (a symlink to a regular file: that file is replaced atomically and the symlink stays).
//  * -o DIR (OutputDir): kiln writes the marker `.kiln-output` (kMarkerFileName) into every directory it
//    writes, listing the files it wrote there. A directory is kiln's to write if it does not exist, is empty,
//    or holds the marker; a non-empty directory without it is refused. In a directory with the marker only
//    the files the marker lists are replaced or removed; every other file stays. The directory itself is
//    never deleted (so `-o .` and an ancestor of the working directory are safe), except one this run
//    created and failed to fill.
//
// Only POSIX calls: see files.h for why kiln avoids std::filesystem on these paths.
#pragma once
#include <set>
#include <string>
#include <vector>

namespace kiln {

inline constexpr const char* kMarkerFileName = ".kiln-output";
inline constexpr int kMarkerFormat = 1;

// Writes `text` to `path` as described above. Throws UserError naming the path on failure.
void writeOutputFile(const std::string& path, const std::string& text);

// A directory kiln writes its output into. Construct it (which claims the directory and makes a staging
// directory inside it), write plain files (no subdirectories) into staging(), then commit(). Destroyed
// without a commit, it removes the staging directory (and the directory, if it created it).
// Stale staging directories (`.kiln-tmp-PID-N` of a process no longer running) are removed on the way.
class OutputDir {
 public:
  // Throws UserError (naming the directory and the fix) for a file, a non-empty directory without the
  // marker, a marker of a newer format, or a directory that cannot be created or written. `flag` names the
  // directory in those messages, as the user gave it ("-o", "--dump-dir").
  explicit OutputDir(const std::string& dir, std::string flag = "-o");
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::string& path() const { return dir_; }         // `dir` without trailing slashes
  const std::string& staging() const { return staging_; }  // where to write the files

  // Moves every staged file into the directory (`last` after all the others: a reader that finds it finds
  // the rest), removes the files of the previous output that are not written again, and records the new
  // list in the marker. Refuses, before moving anything, a staged name that exists in the directory but
  // is not listed in its marker (a file of the user's).
  void commit(const std::string& last = "");

 private:
  void claim();             // checks the directory is kiln's to write, writes the marker, makes staging()
  void abandon() noexcept;  // undoes what this object did, short of a commit
  std::string dir_, staging_, flag_;
  std::vector<std::string> created_;  // directories this object created, outermost first
  bool committed_ = false;
};

// The files a marker lists; throws UserError for a marker kiln cannot read or of a newer format.
std::set<std::string> readMarker(const std::string& dir, const std::string& flag = "-o");

}  // namespace kiln
