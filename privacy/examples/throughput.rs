//! Throughput benchmark: masks a ~50 kB document and prints the time per document.
//!
//! Usage: cargo run --release -p hearth-privacy --example throughput [-- FILE] [ITERATIONS]
//! Without FILE it builds a deterministic 50 kB mix of prose, e-mail headers, chat lines
//! and config snippets with PII (no third-party data). With FILE (e.g. a corpus JSONL),
//! the first 50 kB of its text are used (JSONL lines are decoded to their `text` field).

use std::time::Instant;

use std::sync::Arc;

use hearth_privacy::{
    AddressRecognizer, Analyzer, Anonymizer, CardRecognizer, CredentialUrlRecognizer,
    DateOfBirthRecognizer, EmailRecognizer, Gazetteer, IbanRecognizer, IpRecognizer,
    NationalIdRecognizer, PersonNameRecognizer, PhoneRecognizer, Recognizer, SecretRecognizer,
    SsnRecognizer,
};

const TARGET_BYTES: usize = 50 * 1024;

fn synthetic() -> String {
    let firsts = [
        "Rachel", "Hans", "Marie", "David", "Fatima", "Jürgen", "Chloé", "Kenji",
    ];
    let lasts = [
        "Davis", "Müller", "Dubois", "Nakamura", "Okafor", "Schmidt", "Lefèvre",
    ];
    let mut s = String::new();
    let mut i = 0usize;
    while s.len() < TARGET_BYTES {
        let f = firsts[i % firsts.len()];
        let l = lasts[(i * 3) % lasts.len()];
        s.push_str(&match i % 6 {
            0 => format!(
                "From: {f} {l} <{}.{}@example.com>\nSubject: Re: quarterly figures\n\nDear {f},\n\
                 thanks for the update on the Q3 numbers; the draft looks good. Call me at \
                 +1 650-253-{:04} when you have a minute.\n\n",
                f.to_lowercase(),
                l.to_lowercase(),
                i % 10000
            ),
            1 => format!(
                "[10:{:02}] {f}: the staging box is 10.0.{}.{} and the password is Sup3r-{i}!\n\
                 [10:{:02}] {l}: ok, deploying 2.{i}.0 now\n",
                i % 60,
                i % 255,
                (i * 7) % 255,
                (i + 1) % 60
            ),
            2 => "The parties agree that the services described in Schedule A are delivered \
                  monthly. Invoices are payable within thirty days; late payment bears interest \
                  at the statutory rate. Either party may terminate with three months' notice.\n"
                .to_owned(),
            3 => format!(
                "DATABASE_URL=postgres://app:pw{i}x@db.internal:5432/app\n\
                 OPENAI_API_KEY=sk-proj-{}\nLOG_LEVEL=info\n",
                "abcdefghijklmnopqrstuvwxyz0123456789ABCD"
            ),
            4 => format!(
                "Bitte überweisen Sie den Betrag auf DE89 3704 0044 0532 0130 00. Herr {l} ist \
                 unter 030 {:08} erreichbar; Anschrift: Hauptstraße {}, 10115 Berlin.\n",
                i * 7919 % 100_000_000,
                i % 200 + 1
            ),
            _ => format!(
                "Ticket #{}: customer {f} {l} (born 04/12/1985) reports card 4111 1111 1111 1111 \
                 charged twice; request from 2001:db8::{:x}.\n",
                100_000 + i,
                i
            ),
        });
        i += 1;
    }
    s
}

fn from_file(path: &str) -> Result<String, Box<dyn std::error::Error>> {
    let raw = std::fs::read_to_string(path)?;
    let mut s = String::new();
    for line in raw.lines() {
        let text = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => v["text"].as_str().map(str::to_owned).unwrap_or_default(),
            Err(_) => format!("{line}\n"),
        };
        s.push_str(&text);
        s.push('\n');
        if s.len() >= TARGET_BYTES {
            break;
        }
    }
    let mut cut = TARGET_BYTES.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    Ok(s)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, iterations) = match args.as_slice() {
        [] => (None, 50),
        [a] => match a.parse::<usize>() {
            Ok(n) => (None, n),
            Err(_) => (Some(a.clone()), 50),
        },
        [a, b, ..] => (Some(a.clone()), b.parse().unwrap_or(50)),
    };
    let doc = match &file {
        Some(path) => from_file(path)?,
        None => synthetic(),
    };
    let t_load = Instant::now();
    let anonymizer = Anonymizer::new(Analyzer::from_default_data()?);
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let mut times = Vec::with_capacity(iterations);
    let mut entities = 0;
    for _ in 0..iterations.max(1) {
        let mut conversation = anonymizer.conversation();
        let t0 = Instant::now();
        let masked = conversation.anonymize_with_spans(&doc);
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        entities = masked.entities.len();
        std::hint::black_box(masked);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let p90 = times[(times.len() * 9) / 10];
    println!(
        "document: {} bytes ({}), {} entities masked",
        doc.len(),
        file.as_deref().unwrap_or("synthetic"),
        entities
    );
    println!(
        "anonymize: median {median:.2} ms, p90 {p90:.2} ms, min {:.2} ms over {} runs (target < 50 ms)",
        times[0],
        times.len()
    );
    println!("start-up (gazetteer + recognizers, once per process): {load_ms:.1} ms");

    // Where the time goes: each recognizer alone (median of 11 runs).
    let gazetteer = Arc::new(Gazetteer::load_default()?);
    let recognizers: Vec<Box<dyn Recognizer>> = vec![
        Box::new(SecretRecognizer::new()),
        Box::new(CredentialUrlRecognizer::new()),
        Box::new(EmailRecognizer::new()),
        Box::new(IbanRecognizer::new()),
        Box::new(CardRecognizer::new()),
        Box::new(SsnRecognizer::new()),
        Box::new(NationalIdRecognizer::new()),
        Box::new(IpRecognizer::new()),
        Box::new(PhoneRecognizer::new()),
        Box::new(DateOfBirthRecognizer::new()),
        Box::new(AddressRecognizer::new()),
        Box::new(PersonNameRecognizer::new(gazetteer)),
    ];
    let mut parts = Vec::new();
    for r in &recognizers {
        let mut t = Vec::new();
        for _ in 0..11 {
            let mut out = Vec::new();
            let t0 = Instant::now();
            r.recognize(&doc, &mut out);
            t.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(f64::total_cmp);
        parts.push(format!("{} {:.2}", r.name(), t[t.len() / 2]));
    }
    println!("per recognizer (ms): {}", parts.join(", "));
    Ok(())
}
