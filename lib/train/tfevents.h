/* TensorBoard event files (tfevents.c): TFRecord framing of Event
 * protocol buffers, as TensorFlow and torch.utils.tensorboard write them.
 *
 * A record: uint64 length (little-endian), uint32 masked CRC32C of those 8
 * bytes, the Event, uint32 masked CRC32C of the Event. The Events written:
 *   Event{wall_time=1 (double), step=2 (int64), file_version=3 (string)}
 *   Event{wall_time, step, summary=5: Summary{value=1: Value{tag=1,
 *         simple_value=2 (float)}}}            scalars
 *   Value{tag, metadata=9: SummaryMetadata{plugin_data=1: PluginData{
 *         plugin_name=1 "hparams", content=2: HParamsPluginData}}}
 *                                              hyper-parameters
 *   Event{wall_time, step, session_log=7: SessionLog{status=1: START}}
 *                                              a (re)start
 * Field numbers from tensorflow/core/util/event.proto, summary.proto and
 * tensorboard/plugins/hparams/{api,plugin_data}.proto. Only what cdl
 * writes is encoded; nothing here reads. */
#ifndef CDL_TRAIN_TFEVENTS_H
#define CDL_TRAIN_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C (Castagnoli) of n bytes, and TFRecord's mask of a CRC. */
uint32_t tfev_crc32c(const void *p, size_t n);
uint32_t tfev_mask(uint32_t crc);

typedef struct tfev tfev;
/* Creates dir if needed and a new file dir/events.out.tfevents.<time>.<host>
 * (".<pid>" added if that exists), starting with the file_version Event. */
tfev *tfev_open(const char *dir);
/* The file's path, for messages. */
const char *tfev_path(const tfev *w);
int tfev_scalar(tfev *w, const char *tag, long step, double value);
/* A session (re)starting at step: TensorBoard's reader drops the events
 * of earlier files from this step on, which a run killed after its last
 * checkpoint wrote and its resumption writes again. */
int tfev_session_start(tfev *w, long step);

/* One hyper-parameter: a string or a number. */
typedef struct tfev_hparam {
    const char *name;
    const char *str;          /* NULL: num */
    double num;
} tfev_hparam;
/* The hparams plugin's experiment (the hyper-parameters' names and the
 * metric tags to compare) and this session's values, group = run id. */
int tfev_hparams(tfev *w, const tfev_hparam *hp, int n, const char *const *metric_tags,
                 const char *group);
int tfev_flush(tfev *w);
/* Flushes and closes; -1 if the data did not reach the file. */
int tfev_close(tfev *w);

/* cdl-train's events (tboard.c): hyper-parameters at start, scalars per
 * step record and per epoch (then flushed). Tags in docs/metrics.md. */
#include <cdl/cdl.h>
struct run_info;
struct step_stats;
struct epoch_stats;
int tboard_start(tfev *w, const cdl_train_config *c, const struct run_info *ri);
int tboard_step(tfev *w, const struct step_stats *s);
int tboard_epoch(tfev *w, const struct epoch_stats *s);
int tboard_eval(tfev *w, long step, double loss, double acc);
/* The test set's result with the final weights, at the run's last step. */
int tboard_test(tfev *w, long step, double loss, double acc);

#endif
