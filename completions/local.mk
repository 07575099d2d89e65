# completions: bash completion for cdl-train, cdlrun and the other programs,
# one file installed under each program's name into $(bashcompletiondir) (configure
# --with-bash-completion-dir), where bash-completion loads it on first use.
EXTRA_DIST += completions/cdl-train
install-data-local: install-data-local-completion
install-data-local-completion:
	$(MKDIR_P) '$(DESTDIR)$(bashcompletiondir)'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdl-train'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdlrun'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdl-plot'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdl-eval'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdl-predict'
	$(INSTALL_DATA) $(top_srcdir)/completions/cdl-train '$(DESTDIR)$(bashcompletiondir)/cdl-generate'
uninstall-local: uninstall-local-completion
uninstall-local-completion:
	rm -f '$(DESTDIR)$(bashcompletiondir)/cdl-train' '$(DESTDIR)$(bashcompletiondir)/cdlrun'
	rm -f '$(DESTDIR)$(bashcompletiondir)/cdl-plot'
	rm -f '$(DESTDIR)$(bashcompletiondir)/cdl-eval' '$(DESTDIR)$(bashcompletiondir)/cdl-predict'
	rm -f '$(DESTDIR)$(bashcompletiondir)/cdl-generate'
.PHONY: install-data-local-completion uninstall-local-completion
