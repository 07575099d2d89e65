#!/usr/bin/env bash
# The manual pages in man/: each renders without a single groff warning (as
# lintian checks them), and every option that cdl-train --help and
# cdlrun --help print appears in its page, so the pages cannot fall behind
# the programs; and the source files the docs name exist.
. "${top_srcdir:-.}/tests/e2e/common.sh"

command -v man >/dev/null || { echo "SKIP: man is not installed (Debian: man-db)"; exit 77; }
MAN="$top_srcdir/man"
render() {   # render PAGE: the text to stdout, groff's warnings to stderr
    LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l "$1"
}

# The check itself must see warnings: a page with an unknown request warns.
printf '.TH BAD 1\n.SH NAME\nbad \\- bad\n.XYZZY\n' > "$TMP/bad.1"
render "$TMP/bad.1" >/dev/null 2>"$TMP/warn"
[ -s "$TMP/warn" ] || die "man --warnings reports nothing for a broken page: the check is blind"

for page in "$MAN"/*.[1-8]; do
    # A page that is only `.so manN/OTHER` (another name of OTHER's
    # functions) renders once installed: here its target must exist.
    if [ "$(wc -l <"$page")" -eq 1 ] && grep -qE '^\.so man[1-8]/[^/]+$' "$page"; then
        target=$(sed 's|^\.so man[1-8]/||' "$page")
        [ -f "$MAN/$target" ] || die "$page: .so names $target, which man/ lacks"
        continue
    fi
    render "$page" >"$TMP/$(basename "$page").txt" 2>"$TMP/warn" ||
        { cat "$TMP/warn" >&2; die "man cannot render $page"; }
    [ ! -s "$TMP/warn" ] || { cat "$TMP/warn" >&2; die "$page: groff warnings (above)"; }
    [ -s "$TMP/$(basename "$page").txt" ] || die "$page renders to nothing"
done

# check_options PROGRAM PAGE: every -x and --long-option of PROGRAM --help
# is in the rendered PAGE.
check_options() {
    local prog=$1 page=$2 opt missing=
    "$prog" --help >"$TMP/help" || die "$prog --help failed"
    local opts
    opts=$(grep -oE -- '(^|[^-A-Za-z0-9])(--[a-z][a-z0-9-]*|-[A-Za-z])([^-A-Za-z0-9]|$)' "$TMP/help" |
           grep -oE -- '--?[A-Za-z][a-z0-9-]*' | sort -u)
    [ -n "$opts" ] || die "no options found in $prog --help"
    for opt in $opts; do
        grep -qE -- "(^|[^-A-Za-z0-9])${opt}([^-A-Za-z0-9]|\$)" "$TMP/$page.txt" ||
            missing="$missing $opt"
    done
    [ -z "$missing" ] || die "man/$page lacks options that $prog --help prints:$missing"
    # Each option --help lists as an entry has an entry (a tag line) of its
    # own in the page, and each entry of the page is an option of --help:
    # cdl-train(1) lacked the .TP before --val-split, which ran on inside
    # --augment's paragraph. A tag line starts at the tag indent after a
    # blank line or a heading (a wrapped line of text follows text).
    LC_ALL=C awk '/^       -/ && prev !~ /^    / { print } { prev = $0 }' "$TMP/$page.txt" \
        >"$TMP/tags"
    local entries tags
    entries=$(grep -oE -- '^ +(-[A-Za-z], )?--[a-z][a-z0-9-]*' "$TMP/help" | grep -oE -- '--[a-z][a-z0-9-]*')
    tags=$(grep -oE -- '(^|[ ,])--?[A-Za-z][a-z0-9-]*' "$TMP/tags" | grep -oE -- '--?[A-Za-z][a-z0-9-]*' | sort -u)
    [ -n "$entries" ] && [ -n "$tags" ] || die "no option entries found in $prog --help or man/$page"
    for opt in $entries; do
        grep -qE -- "(^|[^-A-Za-z0-9])${opt}([^-A-Za-z0-9]|\$)" "$TMP/tags" ||
            die "man/$page has no entry of its own for $opt (a .TP or .IP before it?)"
    done
    for opt in $tags; do
        grep -qE -- "(^|[^-A-Za-z0-9])${opt}([^-A-Za-z0-9]|\$)" "$TMP/help" ||
            die "man/$page documents $opt, which $prog --help does not know"
    done
    echo "man/$page: $(echo "$opts" | wc -l) options of $(basename "$prog") --help documented, each with its entry"
}
check_options "$CDL_TRAIN" cdl-train.1
check_options "$CDLRUN" cdlrun.1
check_options "$top_builddir/cli/cdl-plot" cdl-plot.1
check_options "$CDL_EVAL" cdl-eval.1
check_options "$CDL_PREDICT" cdl-predict.1
check_options "$top_builddir/cli/cdl-generate" cdl-generate.1
# The commands in the code blocks of README.md, docs/*.md and
# templates/README.md (fenced, or indented by four spaces; continued lines
# joined) and in the man pages' EXAMPLES give cdl-train, cdl-eval,
# cdl-predict, cdl-generate, cdl-plot and cdlrun only options that the
# program's --help knows, so a renamed option cannot stay in a command a
# reader copies. A word naming another program (python, torchrun) ends the
# options of the cdl program before it.
for p in cdl-train cdl-eval cdl-predict cdl-generate cdl-plot; do
    "$top_builddir/cli/$p" --help >"$TMP/help.$p" 2>&1 || die "$p --help failed"
done
"$CDLRUN" --help >"$TMP/help.cdlrun" 2>&1 || die "cdlrun --help failed"
ncmd=0
for doc in "$top_srcdir"/README.md "$top_srcdir"/docs/*.md "$top_srcdir"/templates/README.md \
           "$TMP"/*.[1-8].txt; do
    awk -v man="${doc##*.}" \
        'man == "txt" && /^[A-Z]/ { fence = /^EXAMPLES?$/; next }
         /^```/ { fence = !fence; next }
         { code = fence || (man != "txt" && /^    /)
           if (!code) { cont = ""; next }
           line = $0; sub(/^ +/, "", line)
           if (line ~ /\\$/) { sub(/\\$/, "", line); cont = cont line " "; next }
           print cont line; cont = "" }' "$doc" >"$TMP/cmds"
    while read -r line; do
        prog=
        # shellcheck disable=SC2086
        set -f; set -- $line; set +f
        for tok; do
            case $tok in '#'*|'|'|'>'*|';'|'&&') break ;; esac
            tok=${tok#[}; tok=${tok%]}
            base=${tok##*/}
            case $base in python*|torchrun) prog=; continue ;; esac
            if [ -n "$base" ] && [ -f "$TMP/help.$base" ]; then prog=$base; ncmd=$((ncmd + 1)); continue; fi
            case $tok in --[a-z]*) ;; *) continue ;; esac
            [ -n "$prog" ] || continue
            opt=${tok%%=*}
            grep -qE -- "(^|[^-a-z0-9])$opt([^-a-z0-9]|\$)" "$TMP/help.$prog" ||
                die "$(basename "$doc" .txt): '$line' gives $prog $opt, which its --help does not know"
        done
    done <"$TMP/cmds"
done
[ "$ncmd" -gt 15 ] || die "only $ncmd commands of cdl programs found in the docs' code blocks: the check is blind"
echo "the options of $ncmd commands in the docs' code blocks and the pages' examples are the programs'"
# Every program with a page in section 1 is named in the cdl-tools rows of
# the package tables (README.md, docs/admin.md), the package that installs
# it: they named cdl-train, cdlrun and cdl-plot only, and a user looking
# for cdl-eval, cdl-predict or cdl-generate found no package holding them.
for doc in README.md docs/admin.md; do
    row=$(grep -E '^\| `cdl-tools` \|' "$top_srcdir/$doc") || die "$doc has no cdl-tools row"
    for page in "$MAN"/*.1; do
        prog=$(basename "$page" .1)
        case $row in *"\`$prog\`"*) ;; *) die "$doc: the cdl-tools row does not name $prog (man/$prog.1)" ;; esac
    done
done
# Every configure switch the docs and pages name (--with-X, --without-X,
# --enable-X, --disable-X) is one that ./configure --help lists, so a
# renamed switch cannot stay in an install recipe.
if [ -x "$top_srcdir/configure" ]; then
    "$top_srcdir/configure" --help >"$TMP/configure-help" || die "configure --help failed"
    nsw=0
    for sw in $(grep -ohE -- '--(with|without|enable|disable)-[a-z0-9-]*[a-z0-9]' "$top_srcdir"/README.md \
                    "$top_srcdir"/docs/*.md "$top_srcdir"/templates/README.md "$TMP"/*.[1-8].txt | sort -u); do
        name=${sw#--}; name=${name#*-}
        grep -qE -- "--(with|without|enable|disable)-$name([^a-z0-9-]|\$)" "$TMP/configure-help" ||
            die "the docs name the configure switch $sw, which configure --help does not list"
        nsw=$((nsw + 1))
    done
    [ "$nsw" -gt 10 ] || die "only $nsw configure switches found in the docs: the check is blind"
    echo "the $nsw configure switches the docs name are configure's"
fi
# Every plugstack.conf key the plugin accepts (its known_keys table) is in
# cdl_spank(8), in docs/admin.md's table and in the installed snippet
# cdl.conf, whose comment lists the settings an admin may add (it lacked
# secret_key=).
keys=$(sed -n '/known_keys\[\] = {/,/};/p' "$top_srcdir/spank/config.c" | grep -oE '"[a-z_]+"' | tr -d '"')
[ "$(echo "$keys" | wc -l)" -ge 10 ] || die "cannot read the keys from spank/config.c"
for key in $keys; do
    grep -q -- "$key=" "$TMP/cdl_spank.8.txt" || die "man/cdl_spank.8 lacks the setting $key="
    grep -q -- "^| \`$key=" "$top_srcdir/docs/admin.md" || die "docs/admin.md's settings table lacks $key="
    grep -q -- "^#   $key=" "$top_srcdir/spank/cdl.conf.in" || die "spank/cdl.conf.in lacks the setting $key="
done
# The example output of srun --cdl-version in docs/admin.md carries the
# contract version of this release (it said 3 after the change to 4).
contract=$(sed -n 's/^#define CDL_CONTRACT_VERSION \([0-9]*\).*/\1/p' "$top_srcdir/lib/dist/contract.h")
grep -q "(rank contract $contract)" "$top_srcdir/docs/admin.md" ||
    die "docs/admin.md: srun --cdl-version's example does not say 'rank contract $contract'"
grep -q "(rank contract $contract)" "$TMP/cdlrun.1.txt" ||
    die "man/cdlrun.1: the --version example does not say 'rank contract $contract'"
# The programs' and the plugin's version lines the docs and pages show
# ("cdl-train (cdl) X.Y.Z", "cdl_spank X.Y.Z"), the library the
# messages call "this libcdl, cdl X.Y.Z" and the rank the store's refusal
# says "This rank runs cdl X.Y.Z" of are this release's: the man pages
# were updated to 0.2.0 and docs/admin.md, docs/slurm-plugin.md kept
# showing 0.1.0 for what srun --cdl-version and cdl-train --version print,
# docs/api.md for a 0.2.0 libcdl refusing a newer program's struct,
# docs/admin.md "This rank runs cdl 0.1.0" for a 0.2.0 rank.
release=$("$CDL_TRAIN" --version | sed -n '1s/^cdl-train (cdl) \([^ ]*\).*/\1/p')
[ -n "$release" ] || die "cannot read the release from cdl-train --version"
old=$(grep -nE '(\(cdl\)|cdl_spank|this libcdl,? \(?cdl|This rank runs cdl) [0-9]+\.[0-9]+\.[0-9]+' "$top_srcdir"/README.md \
          "$top_srcdir"/docs/*.md "$top_srcdir"/templates/README.md "$TMP"/*.[1-8].txt |
       grep -vE "(\(cdl\)|cdl_spank|this libcdl,? \(?cdl|This rank runs cdl) $release([^0-9.]|\$)")
[ -z "$old" ] || die "version lines of another release than $release (the programs print $release): $old"
# Every file of the source tree that README.md, docs/*.md and
# templates/README.md name (a path under one of its top directories with a
# source, script or page suffix; `a.{h,c}` names both) exists: a moved file
# left docs/slurm-plugin.md pointing at spank/bind.h. Skipped: fuzz_X.c (a
# pattern) and DeepSpeed's own launcher/launch.py (docs/pytorch.md).
n=0
for doc in "$top_srcdir"/README.md "$top_srcdir"/docs/*.md "$top_srcdir"/templates/README.md; do
    for p in $(grep -oE '(^|[ `(])(docs|tests|templates|scripts|bench|lib|cli|spank|launcher|kernels|man|debian|modulefiles|completions)/[A-Za-z0-9_./{},-]+\.(c|h|sh|py|md|sbatch|in|am|mk|[1-8])\b' "$doc" |
               sed 's/^[ `(]//' | sort -u); do
        case $p in *_X.*|launcher/launch.py) continue ;; esac
        for q in $(eval "echo $p"); do
            [ -e "$top_srcdir/$q" ] || die "${doc#"$top_srcdir"/} names $q, which does not exist"
            n=$((n + 1))
        done
    done
done
[ "$n" -gt 100 ] || die "only $n source paths found in the docs: the check is blind"
echo "the $n source files the docs name exist"
# Every section the docs send a reader to exists: `FILE.md`, "Heading"
# (also [FILE.md](FILE.md), "Heading"), see "Heading" and "Heading", above
# or below (in the same file), the heading as written or its start before
# a parenthesis ("Token data for language models" of `... (tokens.c)`);
# in the man pages, NAME.md in the guides, "Heading". docs/admin.md sent
# readers to "What must match", docs/pytorch-models.md to data.md's
# "Image folders", neither of which is a heading.
command -v perl >/dev/null || die "perl is not installed: cannot check the docs' section references"
refs=$(perl -e '
    use strict; use warnings;
    my ($top, @pages) = @ARGV;
    my @docs = ("$top/README.md", sort(glob("$top/docs/*.md")), "$top/templates/README.md");
    my %heads;
    for my $d (@docs) {
        open(my $fh, "<", $d) or die "$d: $!";
        my $fence = 0;
        while (<$fh>) {
            if (/^```/) { $fence = !$fence; next }
            push @{$heads{$d}}, $1 if !$fence && /^#+\s*(.*?)\s*$/;
        }
    }
    my %by_base = map { (my $b = $_) =~ s|.*/||; ($b => $_) } @docs;
    my $bad = 0; my $n = 0;
    my $check = sub {
        my ($from, $file, $sec) = @_;
        $n++;
        (my $base = $file) =~ s|.*/||;
        my $t = $file eq "" ? $from : $by_base{$base};
        if (!defined $t) { print "$from: \"$sec\" is in $file, which does not exist\n"; $bad++; return }
        return if grep { $_ eq $sec || index($_, "$sec (") == 0 } @{$heads{$t}};
        (my $f = $from) =~ s|^\Q$top\E/||; (my $g = $t) =~ s|^\Q$top\E/||;
        print "$f sends the reader to \"$sec\", which is no heading of $g\n"; $bad++;
    };
    for my $d (@docs) {
        local $/; open(my $fh, "<", $d) or die; my $s = <$fh>;
        $s =~ s/```.*?```//gs; $s =~ s/\s+/ /g;
        while ($s =~ /([\w.\/-]+\.md)(?:`|\]\([\w.\/-]+\))?,? "([^"]+)"|see "([^"]+)"|"([^"]+)",? (?:above|below)/g) {
            if (defined $1) { $check->($d, $1, $2) } else { $check->($d, "", $3 // $4) }
        }
    }
    for my $p (@pages) {
        local $/; open(my $fh, "<", $p) or die; my $s = <$fh>;
        $s =~ s/\\-/-/g; $s =~ s/^\.[A-Z]+ ?//mg; $s =~ s/\s+/ /g;
        while ($s =~ /(\w[\w-]*\.md) in the guides, "([^"]+)"/g) { $check->($p, $1, $2) }
    }
    print "checked $n\n"; exit($bad ? 1 : 0);
' "$top_srcdir" "$top_srcdir"/man/*.[1-8]) || die "$refs"
nrefs=${refs##*checked }
[ "$nrefs" -gt 15 ] || die "only $nrefs section references found in the docs: the check is blind"
echo "the $nrefs sections the docs and pages send readers to exist"
echo "PASS: man pages"
