/* The text of a character-level model's token ids (cdl-generate): nanoGPT's
 * itos table, which cdl-train copies from the corpus' meta.pkl into the
 * checkpoint's "itos" metadata, and its inverse (nanoGPT's stoi) for the
 * prompt. Kept apart from the model so it is tested on its own
 * (tests/unit/test_vocab.c). */
#ifndef CDL_CLI_VOCAB_H
#define CDL_CLI_VOCAB_H

/* meta: the "itos" metadata, vocab strings one a line, with '\' written
 * "\\" and a line break "\n". *table: vocab non-empty strings
 * (cdl_malloc'd in one block: cdl_free(*table)). -1 with an error when
 * meta does not hold exactly that. */
int vocab_parse(const char *meta, int vocab, char ***table);

/* The prompt s as ids of table (vocab entries), nanoGPT's [stoi[c] for c
 * in s]: at each position the longest entry that matches (an entry may be
 * a character of several UTF-8 bytes). *ids cdl_malloc'd, *n of them; -1
 * with an error naming the first character of s that no entry starts. */
int vocab_encode(const char *s, char *const *table, int vocab, int **ids, int *n);

#endif
