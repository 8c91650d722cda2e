// dptrain: train the GPT model data-parallel over MPI ranks (`mpirun -np W dptrain ...`).
#include <memory>
#include <optional>

#include "dptrain/core/error.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/options.hpp"
#include "dptrain/train/rank_agreement.hpp"
#include "dptrain/train/stop_signal.hpp"
#include "dptrain/train/trainer.hpp"

int main(int argc, char** argv) {
  dptrain::record_stop_signals();  // before MPI starts: a stop signal during set-up stops the run before step 1
  dptrain::MpiWorld world(argc, argv);
  std::optional<dptrain::TrainOptions> options;
  std::unique_ptr<dptrain::Trainer> trainer;
  const int setup = world.agree(
      [&] {
        world.require_thread_multiple();
        // The set-up's exchanges end the job when a peer does not join them within --comm-timeout (its default
        // on a rank whose options did not parse).
        world.set_exchange_timeout(dptrain::TrainOptions{}.comm_timeout);
        options = dptrain::parse_train_options(argc, argv, world.rank() == 0);
        if (options) world.set_exchange_timeout(options->comm_timeout);
        if (options) trainer = std::make_unique<dptrain::Trainer>(*options, world);
      },
      "dptrain");
  if (setup != 0) return setup;
  // --help (or -h) on some ranks only, an MPMD launch: those would return while the others wait for them for ever.
  const int help = world.agree(
      [&] {
        world.watched("the comparison of --help across ranks", [&] {
          dptrain::require_same_on_every_rank(world, {{.name = "--help", .text = options ? "not given" : "given"}});
        });
      },
      "dptrain");
  if (help != 0 || !options) return help;
  // Once every rank has measured the memory left: a rank sharing a GPU or a host must not see another's model.
  if (const int prepared = world.agree([&] { trainer->prepare(); }, "dptrain"); prepared != 0) return prepared;
  if (const int agreed = world.agree([&] { trainer->connect(); }, "dptrain"); agreed != 0) return agreed;
  try {
    return trainer->run();
  } catch (const dptrain::UserError& e) {
    world.abort(e.what(), dptrain::kExitBadInput);
  } catch (const std::bad_alloc&) {
    world.abort(dptrain::out_of_memory_message(), dptrain::kExitBadInput);
  } catch (const std::exception& e) {
    world.abort(e.what(), 1);
  }
}
