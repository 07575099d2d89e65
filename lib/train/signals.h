/* SIGUSR1 / SIGTERM: finish the step, checkpoint, exit (signals.c). */
#ifndef CDL_TRAIN_SIGNALS_H
#define CDL_TRAIN_SIGNALS_H

void train_signals_install(void);
void train_signals_restore(void);
int train_stop_requested(void);

#endif
