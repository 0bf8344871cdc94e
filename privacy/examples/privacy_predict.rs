//! Evaluation helper: reads a corpus JSONL (`{"id", "text", ...}` per line) and writes
//! Hearth's detections as JSONL (`{"id", "spans": [{"start", "end", "type", "score"}]}`),
//! with offsets in Unicode code points (as Python counts them) for the scorer.
//!
//! Usage: cargo run --release -p hearth-privacy --example privacy_predict -- CORPUS OUT
//! Prints the analysis time (excluding I/O and start-up) to stderr.

use std::io::{BufRead, BufWriter, Write};
use std::time::{Duration, Instant};

use hearth_privacy::Analyzer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(input), Some(output)) = (args.get(1), args.get(2)) else {
        return Err("usage: privacy_predict CORPUS.jsonl OUT.jsonl".into());
    };
    let analyzer = Analyzer::from_default_data()?;
    let reader = std::io::BufReader::new(std::fs::File::open(input)?);
    let mut out = BufWriter::new(std::fs::File::create(output)?);
    let mut busy = Duration::ZERO;
    let mut bytes = 0usize;
    let mut docs = 0usize;
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&line)?;
        let text = doc["text"].as_str().unwrap_or_default();
        let t0 = Instant::now();
        let detections = analyzer.analyze(text);
        busy += t0.elapsed();
        bytes += text.len();
        docs += 1;
        // Byte offset -> code point offset.
        let mut char_at = vec![0usize; text.len() + 1];
        let mut n = 0;
        for (i, c) in text.char_indices() {
            for slot in &mut char_at[i..i + c.len_utf8()] {
                *slot = n;
            }
            n += 1;
        }
        char_at[text.len()] = n;
        let spans: Vec<serde_json::Value> = detections
            .iter()
            .map(|d| {
                serde_json::json!({
                    "start": char_at[d.start],
                    "end": char_at[d.end],
                    "type": d.kind.label(),
                    "score": d.score,
                    "recognizer": d.recognizer,
                })
            })
            .collect();
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({"id": doc["id"], "spans": spans}),
        )?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    eprintln!(
        "hearth: {docs} documents, {bytes} bytes analysed in {:.1} ms ({:.1} MB/s)",
        busy.as_secs_f64() * 1e3,
        bytes as f64 / busy.as_secs_f64().max(1e-9) / 1e6
    );
    Ok(())
}
