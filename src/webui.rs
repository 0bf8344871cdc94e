//! The web UI's built files, embedded in the binary at compile time.
//!
//! `build.rs` lists every file of `ui/dist` (the output of `npm run build`
//! in `ui/`) as an `include_bytes!` entry; this module looks them up, names
//! their content type, and renders the self-contained benchmark report
//! (`hearth bench --html`, the UI's "Export HTML"): the report bundle
//! (`ui/dist/report/report.js` + `.css`, built from the same components as
//! the Benchmark page) inlined into one HTML file with the report's JSON.
//! Without `ui/dist` the binary still builds: [`asset`] finds nothing and
//! [`MISSING_UI_PAGE`] says how to build the UI.

mod generated {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// An embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub path: &'static str,
    pub bytes: &'static [u8],
}

impl Asset {
    pub fn content_type(&self) -> &'static str {
        content_type(self.path)
    }

    /// Vite names the files under `assets/` by their content hash, so they
    /// never change under the same name.
    pub fn is_immutable(&self) -> bool {
        self.path.starts_with("assets/")
    }
}

/// Whether the UI was built before this binary.
pub fn is_built() -> bool {
    asset("index.html").is_some()
}

/// The embedded file at `path` (relative to `ui/dist`, no leading slash).
pub fn asset(path: &str) -> Option<Asset> {
    generated::ASSETS
        .iter()
        .find(|(name, _)| *name == path)
        .map(|&(path, bytes)| Asset { path, bytes })
}

/// Every embedded file's path.
pub fn asset_paths() -> impl Iterator<Item = &'static str> {
    generated::ASSETS.iter().map(|(name, _)| *name)
}

/// Content type by file extension.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// Served at `/` when the binary was built without `ui/dist`.
pub const MISSING_UI_PAGE: &str = "<!doctype html><meta charset=utf-8><title>Hearth</title>\
<h1>Hearth: the web UI was not built</h1>\
<p>This binary was compiled without <code>ui/dist</code>. Build the UI, then the binary:</p>\
<pre>cd ui &amp;&amp; npm ci &amp;&amp; npm run build &amp;&amp; cd .. &amp;&amp; cargo build --release</pre>\
<p>(<code>scripts/setup.sh</code> does both.) The API works without it: \
<a href=\"/v1/models\">/v1/models</a>, <a href=\"/api/status\">/api/status</a>.</p>";

/// Why a report page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportPageError {
    #[error(
        "this hearth binary was built without the web UI (ui/dist), which holds the HTML report's \
         code; run `npm ci && npm run build` in ui/ (or scripts/setup.sh), then rebuild"
    )]
    UiNotBuilt,
    #[error("cannot encode the report: {0}")]
    Json(#[from] serde_json::Error),
}

/// One self-contained HTML file showing `report` (a bench report) with the
/// same tables and charts as the UI's Benchmark page; no network needed.
pub fn report_html<T: serde::Serialize>(report: &T) -> Result<String, ReportPageError> {
    let script = asset("report/report.js").ok_or(ReportPageError::UiNotBuilt)?;
    let style = asset("report/report.css")
        .map(|a| String::from_utf8_lossy(a.bytes).into_owned())
        .unwrap_or_default();
    let json = serde_json::to_string(report)?;
    let script = String::from_utf8_lossy(script.bytes);
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Hearth benchmark report</title>\n<style>{}</style></head>\n\
         <body><div id=\"report\"></div>\n\
         <script id=\"hearth-report\" type=\"application/json\">{}</script>\n\
         <script>{}</script></body></html>\n",
        escape_raw_text(&style, "style"),
        escape_raw_text(&json, "script"),
        escape_raw_text(&script, "script"),
    ))
}

/// Text placed inside a raw-text element (`<script>`, `<style>`) must not
/// contain the element's end tag; `<\/` is the same text to JSON and JS
/// strings and cannot close the element.
fn escape_raw_text(text: &str, element: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let lower = text.to_ascii_lowercase();
    let needle = format!("</{element}");
    let mut last = 0;
    for (i, _) in lower.match_indices(&needle) {
        out.push_str(&text[last..i]);
        out.push_str("<\\/");
        last = i + 2;
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_by_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(
            content_type("assets/index-abc.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(content_type("assets/x.CSS"), "text/css; charset=utf-8");
        assert_eq!(content_type("favicon.svg"), "image/svg+xml");
        assert_eq!(content_type("blob"), "application/octet-stream");
    }

    #[test]
    fn raw_text_cannot_close_its_element() {
        let json = serde_json::json!({"text": "</script><script>alert(1)</script>"}).to_string();
        let escaped = escape_raw_text(&json, "script");
        assert!(!escaped.to_ascii_lowercase().contains("</script"));
        // Still the same JSON value.
        let back: serde_json::Value = serde_json::from_str(&escaped).expect("json");
        assert_eq!(back["text"], "</script><script>alert(1)</script>");
        assert_eq!(escape_raw_text("a</STYLE>b", "style"), "a<\\/STYLE>b");
    }

    #[test]
    fn report_page_needs_the_built_ui() {
        let page = report_html(&serde_json::json!({"x": "</script>"}));
        if is_built() {
            let page = page.expect("page");
            assert!(page.contains("id=\"hearth-report\""));
            assert!(!page.contains("\"</script>\""));
        } else {
            assert!(matches!(page, Err(ReportPageError::UiNotBuilt)));
        }
    }
}
