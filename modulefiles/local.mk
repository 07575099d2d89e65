# modulefiles: the Tcl modulefile cdl/VERSION (Lmod and Environment Modules),
# installed into $(modulefilesdir)/cdl/ (configure --with-modulefiles-dir).
# Made by make, not configure, so that the paths are fully expanded and
# follow `make prefix=...`.
EXTRA_DIST += modulefiles/cdl.in
noinst_DATA += modulefiles/cdl
CLEANFILES += modulefiles/cdl
# LD_RUN_PATH only for a libdir outside the loader's own directories (a
# package's /usr/lib/TRIPLET needs no run path, and Debian forbids one).
modulefiles/cdl: $(top_srcdir)/modulefiles/cdl.in Makefile
	$(AM_V_GEN)$(MKDIR_P) modulefiles && \
	case '$(libdir)' in /lib|/lib64|/usr/lib|/usr/lib64|/lib/*-*-*|/usr/lib/*-*-*) \
	    runpath='/LD_RUN_PATH/d';; *) runpath=;; esac && \
	sed -e 's|@VERSION[@]|$(VERSION)|g' -e 's|@bindir[@]|$(bindir)|g' \
	    -e 's|@mandir[@]|$(mandir)|g' -e 's|@libdir[@]|$(libdir)|g' \
	    -e 's|@includedir[@]|$(includedir)|g' -e "$$runpath" \
	    $(top_srcdir)/modulefiles/cdl.in > $@

# A release installed over another in the same prefix left the older
# release's modulefile behind: `module load cdl/OLD` then gave the new
# release's programs under the old name. Modulefiles of other versions
# whose PATH is this bindir describe this prefix no more and go (named).
install-data-local: install-data-local-modulefile
install-data-local-modulefile: modulefiles/cdl
	$(MKDIR_P) '$(DESTDIR)$(modulefilesdir)/cdl'
	@for m in '$(DESTDIR)$(modulefilesdir)'/cdl/*; do \
	  test -f "$$m" && test "$${m##*/}" != '$(VERSION)' || continue; \
	  if awk '$$1 == "prepend-path" && $$2 == "PATH" && $$3 == "$(bindir)" { f = 1 } END { exit !f }' "$$m"; then \
	    echo "cdl: removed the modulefile $$m: $(VERSION) is now installed in its prefix"; \
	    rm -f "$$m" || exit 1; \
	  fi; \
	done
	$(INSTALL_DATA) modulefiles/cdl '$(DESTDIR)$(modulefilesdir)/cdl/$(VERSION)'
uninstall-local: uninstall-local-modulefile
uninstall-local-modulefile:
	rm -f '$(DESTDIR)$(modulefilesdir)/cdl/$(VERSION)'
.PHONY: install-data-local-modulefile uninstall-local-modulefile
