# spank: the Slurm SPANK plugin cdl_spank.so (srun --cdl-ddp, --cdl-mps,
# --cdl-bind). It is loaded into srun, sbatch, salloc, slurmd and slurmstepd,
# so it links nothing of libcdl but the rank contract's rules
# (lib/dist/contract.c, pure libc, compiled in), exports only the SPANK entry points
# (spank/cdl_spank.map) and is hardened: FORTIFY (spank/harden.h), stack
# protector, full RELRO, non-executable stack.
#
# The pure modules (SPANK_CORE_SOURCES: no Slurm symbols) are also compiled
# straight into the unit tests (tests/unit/spank.mk).
SPANK_CORE_SOURCES = spank/util.c spank/util.h spank/config.c spank/conf.h \
	spank/options.c spank/options.h spank/contract.c spank/contract.h \
	spank/port.c spank/port.h spank/packing.c spank/packing.h spank/threads.c spank/threads.h \
	spank/torchrun.c spank/torchrun.h \
	spank/badexit.c spank/badexit.h \
	spank/spawn.c spank/spawn.h spank/rundir.c spank/rundir.h spank/mps.c spank/mps.h \
	spank/secret.c spank/secret.h spank/shmsweep.c spank/shmsweep.h \
	lib/dist/contract.c lib/dist/contract.h
if HAVE_HWLOC
SPANK_CORE_SOURCES += lib/dist/bind.c spank/stepcpus.c spank/stepcpus.h spank/overlap.c \
	spank/overlap.h
endif
SPANK_CPPFLAGS = $(AM_CPPFLAGS) -include $(top_srcdir)/spank/harden.h $(HWLOC_CFLAGS) \
	$(NETTLE_CFLAGS)
SPANK_CFLAGS = $(AM_CFLAGS) -fstack-protector-strong

EXTRA_DIST += spank/harden.h spank/cdl_spank.map spank/cdl.conf.in lib/dist/bind.c lib/dist/bind.h \
	spank/stepcpus.c spank/stepcpus.h spank/overlap.c spank/overlap.h

if HAVE_SLURM
slurmplugin_LTLIBRARIES = spank/cdl_spank.la
spank_cdl_spank_la_SOURCES = $(SPANK_CORE_SOURCES) lib/dist/bind.h spank/plugin.c spank/plugin.h \
	spank/remote.c spank/epilog.c
spank_cdl_spank_la_CPPFLAGS = $(SPANK_CPPFLAGS) $(SLURM_CPPFLAGS)
spank_cdl_spank_la_CFLAGS = $(SPANK_CFLAGS)
# No -no-undefined: slurm_* and spank_* resolve against the host process.
spank_cdl_spank_la_LDFLAGS = -module -avoid-version -shared \
	-Wl,--version-script=$(top_srcdir)/spank/cdl_spank.map \
	-Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack
spank_cdl_spank_la_LIBADD = $(HWLOC_LIBS) $(NETTLE_LIBS)
EXTRA_spank_cdl_spank_la_DEPENDENCIES = $(top_srcdir)/spank/cdl_spank.map

# The plugstack.conf.d snippet, with the install path of the plugin.
# configure --with-plugstack-dir=DIR (packages: /etc/slurm/plugstack.conf.d).
# It is the admin's to edit (`required`, settings), so a later make install
# (the next release) keeps an edited file and puts its own beside it as
# cdl.conf.new, as dpkg does with a conffile. make uninstall removes both:
# a kept line naming the removed plugin would stop slurmd (docs/admin.md).
SPANK_SNIPPET = spank/cdl.conf
noinst_DATA += spank/cdl.conf
CLEANFILES += spank/cdl.conf
spank/cdl.conf: $(top_srcdir)/spank/cdl.conf.in Makefile
	$(AM_V_GEN)$(MKDIR_P) spank && \
	sed -e 's|@slurmplugindir[@]|$(slurmplugindir)|g' $(top_srcdir)/spank/cdl.conf.in > $@
else
SPANK_SNIPPET =
endif

# Prints the cdl_spank.so path a snippet file loads when it is not this
# installation's (nothing when it loads this one's, or none). A line
# commented out counts too: the Debian package's cdl.conf ships its line
# disabled, and is the package's (its postinst installs it, purge removes
# it), not this installation's to remove.
SPANK_OTHER_PLUGIN = awk -v so='$(slurmplugindir)/cdl_spank.so' \
	'{ line = $$0; sub(/^[ \t]*\#[ \t]*/, "", line); n = split(line, f); \
	   if (n >= 2 && f[1] ~ /^(required|optional)$$/ && f[2] ~ /cdl_spank[.]so$$/) { \
	     if (f[2] == so) mine = 1; else if (other == "") other = f[2] } } \
	 END { if (!mine) print other }'

# The snippet's install (see above); nothing without the plugin. A kept
# file that loads another installation's plugin (another prefix) is named
# as such, not as the admin's edit.
install-data-local: install-data-local-spank
install-data-local-spank: $(SPANK_SNIPPET)
	@for f in $(SPANK_SNIPPET); do \
	  dst='$(DESTDIR)$(plugstackdir)/cdl.conf'; \
	  $(MKDIR_P) '$(DESTDIR)$(plugstackdir)' || exit 1; \
	  if test -f "$$dst" && ! cmp -s "$$f" "$$dst"; then \
	    echo " $(INSTALL_DATA) $$f '$$dst.new'"; \
	    $(INSTALL_DATA) "$$f" "$$dst.new" || exit 1; \
	    other=`$(SPANK_OTHER_PLUGIN) "$$dst"` || exit 1; \
	    if test -n "$$other"; then \
	      echo "cdl: kept $$dst: it loads another installation's plugin ($$other); this installation's snippet is $$dst.new: rename it to cdl.conf to load this one's"; \
	    else \
	      echo "cdl: kept the edited $$dst; this release's snippet is $$dst.new"; \
	    fi; \
	  else \
	    echo " $(INSTALL_DATA) $$f '$$dst'"; \
	    $(INSTALL_DATA) "$$f" "$$dst" && rm -f "$$dst.new" || exit 1; \
	  fi; \
	done
# Only files that load this installation's plugin (or none) go: with two
# installations side by side (--prefix=/opt/cdl/1 and /opt/cdl/2, one
# plugstack dir), uninstalling the old one removed the snippet loading the
# new one's plugin (cdl.conf, or cdl.conf.new waiting to replace it), and
# --cdl-ddp vanished from the cluster without a word.
uninstall-local: uninstall-local-snippet
uninstall-local-snippet:
	@for f in $(SPANK_SNIPPET); do \
	  so='$(slurmplugindir)/cdl_spank.so'; removed=; \
	  for dst in '$(DESTDIR)$(plugstackdir)/cdl.conf' '$(DESTDIR)$(plugstackdir)/cdl.conf.new'; do \
	    test -f "$$dst" || continue; \
	    other=`$(SPANK_OTHER_PLUGIN) "$$dst"` || exit 1; \
	    if test -z "$$other"; then \
	      echo " rm -f '$$dst'"; rm -f "$$dst" || exit 1; removed="$$removed$$dst "; \
	    elif test -n "$$removed"; then \
	      echo "cdl: kept $$dst: it loads another installation's plugin ($$other); rename it to cdl.conf to load that one (this installation's cdl.conf is removed)"; \
	    else \
	      echo "cdl: kept $$dst: it loads another installation's plugin ($$other), not this one's ($$so)"; \
	    fi; \
	  done; \
	done
.PHONY: install-data-local-spank uninstall-local-snippet

# Slurm loads cdl_spank.so only; a libtool .la beside it is useless to it
# and would be one more file in every package, so it never stays installed.
# Without the .la, libtool's uninstall no longer knows the .so: remove it here.
install-data-hook: install-data-hook-spank
install-data-hook-spank:
	rm -f '$(DESTDIR)$(slurmplugindir)/cdl_spank.la'
uninstall-local: uninstall-local-spank
uninstall-local-spank:
	rm -f '$(DESTDIR)$(slurmplugindir)/cdl_spank.so'
.PHONY: install-data-hook-spank uninstall-local-spank
