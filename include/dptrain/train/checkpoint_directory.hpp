// The checkpoint directory as a whole: the step folders in it, the `latest` file naming the newest, and every
// transition between them. Each transition is a sequence of atomic steps (rename, atomic file replacement), and
// at every point between two of them `latest` names a complete step folder:
//   1. the new step is written beside the old ones as `.step-NNNNNN.tmp`;
//   2. it is renamed into place under a name no folder has (`step-NNNNNN`, or `step-NNNNNN-2`, ... when a folder
//      of that step exists, e.g. a run repeating steps after --overwrite);
//   3. `latest` is replaced atomically to name it;
//   4. only then is the folder it replaced (same step, older) removed.
// A kill at any point leaves either the old or the new checkpoint as `latest`, plus at most a `.step-*.tmp` folder
// that the next run removes at start-up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dptrain/train/options.hpp"
#include "dptrain/train/save_lock.hpp"

namespace dptrain {

// The points between the steps of publish_step(); a test hook throws at one to stand for a kill there.
enum class PublishPoint { before_rename, renamed, latest_switched };

// Steps 2–4 above for the finished temporary folder `temporary` of step folder `name` in `root` (rank 0).
// Returns the name it was published under.
std::string publish_step(const std::string& root, const std::string& temporary, const std::string& name,
                         const std::function<void(PublishPoint)>& hook = {});

// The step folder `root/latest` names, checked to be a plain name of an existing folder. Throws UserError.
std::string read_latest(const std::string& root);

// The step folders of root (`step-NNNNNN` or `step-NNNNNN-k` holding a meta.json: what a save publishes), oldest
// first (by step, then k). Others of such a name are left alone by every function here.
std::vector<std::string> step_folders(const std::string& root);

// Removes the oldest step folders beyond the newest `keep_last` (0: keep all), never the one `latest` names.
// Returns the names removed.
std::vector<std::string> prune_steps(const std::string& root, int keep_last);

// Removes every step folder but `keep` (an --overwrite run replacing the earlier run's checkpoints once its own
// first one is in place).
void remove_other_steps(const std::string& root, const std::string& keep);

// Removes `.step-*.tmp` folders and `latest.tmp.<pid>` files (left by a run killed while saving) inside root, and
// nothing else. Returns them. Only under the directory's lock: another run's temporaries are not stale.
std::vector<std::string> remove_stale_temporaries(const std::string& root);

// The bytes one checkpoint takes: BF16 weights (2 per parameter), fp32 master, m and v (12 per parameter), and
// an allowance for the safetensors headers and meta.json.
std::uint64_t checkpoint_bytes(std::size_t parameters, std::size_t tensors);

// Refuses (UserError) when the filesystem holding dir has less than `needed` bytes free, with both figures.
void require_free_space(const std::string& dir, std::uint64_t needed);

// Whether this run resumes from its own --save directory (continuing it, not replacing another run's).
bool continues_in_place(const TrainOptions& options);

// The set-up check of --save on every rank (each writes its optimizer shard; ranks on other hosts may see another
// filesystem), before step 1: no regular file in the path, and a probe file can be written into it or its
// nearest existing parent (a read-only filesystem fails; nothing else is created). Throws UserError.
void require_save_writable(const TrainOptions& options, int rank);

// The set-up checks of --save on rank 0, before step 1: require_save_writable, it holds no checkpoints unless this
// run resumes from it or --overwrite is given, and its filesystem has room for one checkpoint. Where the directory
// has a lock file, takes the lock (no other run may be using it), then removes stale temporaries. Throws
// UserError.
void prepare_save_directory(const TrainOptions& options, std::size_t parameters, std::size_t tensors,
                            SaveLock& lock);

}  // namespace dptrain
