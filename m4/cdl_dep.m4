# CDL_WITH_DEP(NAME, HELP, required|optional, PKGCONFIG, HEADER, LIB, FUNC, DEBIAN_PACKAGE)
#
# --with-NAME[=PREFIX] / --without-NAME for one library. Tries pkg-config
# first (unless a PREFIX is given), then the header and library directly.
# Sets NAME_CFLAGS/NAME_LIBS (upper-case), have_NAME, HAVE_NAME (config.h
# and an automake conditional). A required library that is missing stops
# configure with the Debian package to install.
AC_DEFUN([CDL_WITH_DEP], [
m4_pushdef([UP], m4_translit([$1], [a-z], [A-Z]))
AC_ARG_WITH([$1],
  [AS_HELP_STRING([--with-$1[=PREFIX]], [$2 (]m4_if([$3], [required], [required], [default: if found])[)])],
  [], [with_$1=check])
have_$1=no
AS_IF([test "x$with_$1" = xno],
  [m4_if([$3], [required], [AC_MSG_ERROR([$1 is required and cannot be disabled ($2)])])],
  [AS_IF([test "x$with_$1" != xyes && test "x$with_$1" != xcheck],
     [UP[]_CFLAGS="-I$with_$1/include"; UP[]_LIBS="-L$with_$1/lib -l$6"],
     [PKG_CHECK_MODULES(UP, [$4], [], [UP[]_CFLAGS=; UP[]_LIBS="-l$6"])])
   save_CPPFLAGS=$CPPFLAGS; save_LIBS=$LIBS
   CPPFLAGS="$CPPFLAGS $UP[]_CFLAGS"; LIBS="$UP[]_LIBS $LIBS"
   AC_CHECK_HEADER([$5],
     [AC_MSG_CHECKING([for $7 in $UP[]_LIBS])
      AC_LINK_IFELSE([AC_LANG_CALL([], [$7])],
        [have_$1=yes], [have_$1=no])
      AC_MSG_RESULT([$have_$1])], [], [[#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>]])
   CPPFLAGS=$save_CPPFLAGS; LIBS=$save_LIBS
   AS_IF([test "x$have_$1" = xno],
     [m4_if([$3], [required],
        [AC_MSG_ERROR([$2 not found: install the Debian package $8 (apt-get install $8) or pass --with-$1=PREFIX])],
        [AS_IF([test "x$with_$1" != xcheck],
           [AC_MSG_ERROR([--with-$1 given but $5/-l$6 were not found: install $8 or pass --with-$1=PREFIX])])
         UP[]_CFLAGS=; UP[]_LIBS=])])])
AS_IF([test "x$have_$1" = xyes], [AC_DEFINE([HAVE_]UP, [1], [$2])])
AC_SUBST(UP[_CFLAGS])
AC_SUBST(UP[_LIBS])
AM_CONDITIONAL([HAVE_]UP, [test "x$have_$1" = xyes])
m4_popdef([UP])
])
