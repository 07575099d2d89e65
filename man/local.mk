# man: the manual pages, written in roff and kept here as the source of
# truth (tests/e2e/man.sh renders them with warnings on and checks that
# every option of cdl-train --help and cdlrun --help is documented).
dist_man_MANS = man/cdl-train.1 man/cdlrun.1 man/cdl-model-spec.5 man/cdl_spank.8
dist_man_MANS += man/cdl-plot.1
dist_man_MANS += man/cdl-eval.1 man/cdl-predict.1
dist_man_MANS += man/cdl-generate.1
dist_man_MANS += man/libcdl.3 man/cdl_train_run.3 man/cdl_train_defaults.3
