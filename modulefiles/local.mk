# modulefiles: the Tcl modulefile cdl/VERSION (Lmod and Environment Modules),
# installed into $(modulefilesdir)/cdl/ (configure --with-modulefiles-dir).
# Made by make, not configure, so that the paths are fully expanded and
# follow `make prefix=...`.
EXTRA_DIST += modulefiles/cdl.in
noinst_DATA = modulefiles/cdl
CLEANFILES += modulefiles/cdl
modulefiles/cdl: $(top_srcdir)/modulefiles/cdl.in Makefile
	$(AM_V_GEN)$(MKDIR_P) modulefiles && \
	sed -e 's|@VERSION[@]|$(VERSION)|g' -e 's|@bindir[@]|$(bindir)|g' \
	    -e 's|@mandir[@]|$(mandir)|g' -e 's|@libdir[@]|$(libdir)|g' \
	    -e 's|@includedir[@]|$(includedir)|g' $(top_srcdir)/modulefiles/cdl.in > $@

install-data-local: install-data-local-modulefile
install-data-local-modulefile: modulefiles/cdl
	$(MKDIR_P) '$(DESTDIR)$(modulefilesdir)/cdl'
	$(INSTALL_DATA) modulefiles/cdl '$(DESTDIR)$(modulefilesdir)/cdl/$(VERSION)'
uninstall-local: uninstall-local-modulefile
uninstall-local-modulefile:
	rm -f '$(DESTDIR)$(modulefilesdir)/cdl/$(VERSION)'
.PHONY: install-data-local-modulefile uninstall-local-modulefile
