//! Person names from a gazetteer, capitalisation and context cues.
//!
//! The text is cut into word tokens; runs of capitalised tokens on one line (with name
//! particles such as `de la`, `von`, `van der`, and initials like `F.`) are candidates.
//! A candidate is a person when:
//! - a title precedes it (`Mr.`, `Dr.`, `Herr`, `Frau`, `Mme`, `Monsieur`...); or
//! - a cue precedes or follows it (a greeting `Dear`/`Hallo`/`Bonjour`, an introduction
//!   `my name is`/`ich heiße`/`je m'appelle`, a header `From:`/`Kunde:`, a speaker label
//!   `Anna:` at the start of a line, a signature line after `Best regards`, `wrote:`) and
//!   it holds a known given name or surname; or
//! - without a cue, it is at least two tokens, starts with a known given name that is not
//!   a common word, and ends with a known surname or an unknown capitalised word that the
//!   document never writes in lower case.
//!
//! Once a name is accepted, its parts are remembered for the rest of the document, so a
//! later `Rachel` or `Davis` alone is found too. Runs followed by a company suffix
//! (`GmbH`, `Inc.`, `SARL`...) are organisations and are skipped.

use std::collections::HashSet;
use std::sync::Arc;

use super::Recognizer;
use crate::entity::{Detection, EntityKind};
use crate::gazetteer::Gazetteer;
use crate::text::fold;

/// Finds person names.
pub struct PersonNameRecognizer {
    gazetteer: Arc<Gazetteer>,
}

impl PersonNameRecognizer {
    /// A recognizer using `gazetteer` for given names and surnames.
    pub fn new(gazetteer: Arc<Gazetteer>) -> Self {
        PersonNameRecognizer { gazetteer }
    }
}

/// Honorifics and titles (folded, without the trailing dot).
#[rustfmt::skip]
const TITLES: &[&str] = &[
    "mr", "mrs", "ms", "miss", "mx", "dr", "prof", "professor", "sir", "madam", "dame", "lord",
    "lady", "herr", "herrn", "frau", "fr", "hr", "dipl", "ing", "mag", "m", "mme", "mmes", "mlle",
    "monsieur", "madame", "mademoiselle", "me", "maitre", "docteur", "pr", "rev", "fr",
];

/// Greetings, introductions and header labels after which a name is expected (folded).
#[rustfmt::skip]
const CUES_BEFORE: &[&str] = &[
    "dear", "hi", "hello", "hey", "hiya", "greetings", "good morning", "good afternoon",
    "good evening", "thanks", "thank you", "cheers", "welcome", "congratulations", "hallo", "liebe",
    "lieber", "servus", "moin", "guten tag", "guten morgen", "danke", "vielen dank", "bonjour",
    "bonsoir", "salut", "coucou", "cher", "chere", "merci", "my name is", "name is", "i am", "i'm",
    "this is", "it's", "call me", "mein name ist", "ich bin", "ich heisse", "hier ist",
    "je m'appelle", "je suis", "moi c'est", "ici", "name:", "name :", "from:", "to:", "cc:", "von:",
    "an:", "de :", "a :", "de:", "contact:", "contact :", "attn", "attention", "client:",
    "customer:", "kunde:", "kundin:", "ansprechpartner:", "ansprechpartnerin:", "nom :", "nom:",
    "prenom :", "agent:", "assigned to", "assignee:", "reported by", "requested by", "created by",
    "signed by", "submitted by", "approved by", "represented by", "vertreten durch",
    "represente par", "representee par", "zugewiesen an", "bearbeiter:", "erstellt von",
    "gemeldet von", "signe par", "by", "from", "with", "von", "mit", "avec", "par", "for", "fur",
    "pour", "employee:", "mitarbeiter:", "tenant:", "landlord:", "mieter:", "vermieter:",
    "locataire :", "bailleur :", "cc", "ask", "tell", "told", "asked", "contacted", "met",
    "spoke to", "spoke with", "talked to", "frag", "fragen sie", "demandez a", "aupres de",
    "colleague", "kollege", "kollegin", "collegue", "manager", "ceo", "cto", "cfo", "boss", "chef",
    "cheffe", "partner", "partnerin", "assistant", "assistent", "assistentin", "an", "a", "et",
    "und", "and",
];

/// Cues that alone make a single known given name or surname a person.
#[rustfmt::skip]
const STRONG_CUES: &[&str] = &[
    "dear", "hi", "hello", "hey", "hallo", "liebe", "lieber", "bonjour", "salut", "cher", "chere",
    "my name is", "name is", "mein name ist", "ich heisse", "je m'appelle", "name:", "name :",
    "from:", "to:", "von:", "an:", "contact:", "kunde:", "kundin:", "client:", "customer:",
    "ansprechpartner:", "ansprechpartnerin:", "nom :", "nom:", "assigned to", "assignee:",
    "reported by", "requested by", "signed by", "vertreten durch", "represente par", "bearbeiter:",
    "agent:", "thanks", "thank you", "danke", "merci", "cc:", "attn", "employee:", "mitarbeiter:",
    "tenant:", "landlord:", "mieter:", "vermieter:",
];

/// Closings after which the next line is usually a signature.
#[rustfmt::skip]
const CLOSINGS: &[&str] = &[
    "regards", "best regards", "kind regards", "warm regards", "best wishes", "best", "sincerely",
    "yours sincerely", "yours truly", "cheers", "thanks", "thank you", "many thanks",
    "mit freundlichen grussen", "freundliche grusse", "viele grusse", "beste grusse",
    "liebe grusse", "herzliche grusse", "gruss", "grusse", "lg", "vg", "mfg", "cordialement",
    "bien cordialement", "bien a vous", "salutations", "sinceres salutations", "amities",
    "a bientot", "merci", "bisous",
];

/// Words after a name that mark it as a company.
#[rustfmt::skip]
const COMPANY_SUFFIXES: &[&str] = &[
    "inc", "llc", "ltd", "limited", "corp", "corporation", "co", "company", "plc", "group",
    "holdings", "gmbh", "ag", "kg", "kgaa", "ohg", "ug", "ev", "stiftung", "sarl", "sa", "sas",
    "sasu", "eurl", "sci", "snc", "fils", "freres", "associates", "partners", "bros", "llp", "sons",
    "gbr", "mbh", "partg", "se", "eg", "ltda", "bv", "nv", "oy", "ab", "spa", "srl", "lp",
    "foundation", "bank", "university", "universitat", "universite", "institute", "club",
    "hospital", "school", "hotel", "restaurant", "cafe", "airport",
];

/// Name particles that may sit inside a name in lower case.
#[rustfmt::skip]
const PARTICLES: &[&str] = &[
    "de", "du", "des", "la", "le", "van", "von", "der", "den", "ter", "ten", "zu", "zum", "di",
    "da", "dos", "das", "del", "della", "bin", "ibn", "al", "el", "y", "e", "af", "op",
];

/// Common capitalised words that are not names, in English, German and French (folded).
/// General vocabulary (function words, calendar words, greetings, frequent nouns and
/// place words), not tuned to any corpus.
#[rustfmt::skip]
const STOP: &[&str] = &[
    // English function words and sentence starters.
    "a", "an", "the", "this", "that", "these", "those", "it", "its", "i", "we", "you", "he", "she",
    "they", "our", "your", "my", "his", "her", "their", "and", "or", "but", "if", "then", "so",
    "as", "at", "by", "for", "from", "in", "into", "of", "on", "to", "with", "without", "about",
    "after", "before", "during", "under", "over", "between", "please", "thanks", "thank", "hi",
    "hello", "hey", "dear", "regards", "best", "kind", "yes", "no", "not", "ok", "okay", "can",
    "could", "will", "would", "shall", "should", "may", "might", "must", "do", "does", "did", "is",
    "are", "was", "were", "be", "been", "have", "has", "had", "all", "any", "each", "every", "some",
    "here", "there", "when", "where", "what", "which", "who", "why", "how", "also", "just", "only",
    "new", "old", "good", "great", "sure", "sorry", "welcome", "note", "see", "let", "per", "re",
    "fw", "fwd", "subject", "date", "time", "today", "tomorrow", "yesterday", "hope", "well", "via",
    "one", "two", "first", "last", "next", "once", "still", "again", "more", "most", "other",
    "such", "same", "very", "world", "everyone", "all", "folks", "guys", "team", "there",
    // Calendar.
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january",
    "february", "march", "july", "september", "october", "november", "december", "montag",
    "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag", "januar", "februar",
    "marz", "mai", "juni", "juli", "oktober", "dezember", "lundi", "mardi", "mercredi", "jeudi",
    "vendredi", "samedi", "dimanche", "janvier", "fevrier", "mars", "avril", "juin", "juillet",
    "aout", "septembre", "octobre", "novembre", "decembre", "christmas", "easter", "weihnachten",
    "ostern", "paques",
    // Frequent nouns and roles in business text.
    "team", "customer", "client", "support", "service", "manager", "sales", "account", "company",
    "agreement", "contract", "invoice", "order", "ticket", "issue", "request", "update", "meeting",
    "office", "department", "director", "president", "chief", "officer", "party", "parties",
    "section", "article", "clause", "schedule", "annex", "exhibit", "appendix", "page", "total",
    "amount", "price", "payment", "bank", "card", "email", "e-mail", "mail", "phone", "address",
    "name", "user", "admin", "password", "login", "internet", "web", "online", "app", "api",
    "server", "error", "status", "priority", "high", "low", "medium", "open", "closed", "pending",
    "resolved", "urgent", "summary", "description", "details", "information", "info", "question",
    "answer", "problem", "product", "delivery", "shipping", "return", "refund", "help", "hotline",
    "reference", "number", "code", "key", "token", "secret", "database", "config", "settings",
    "project", "system", "data", "file", "document", "report", "board", "staff", "employee",
    "tenant", "landlord", "buyer", "seller", "supplier", "vendor", "contractor", "provider",
    "consultant", "signature", "signed", "witness", "notary", "court", "law", "state", "government",
    "federal", "national", "international", "global", "general", "public", "private",
    // Place words.
    "city", "county", "street", "road", "avenue", "river", "valley", "park", "village", "town",
    "center", "centre", "island", "beach", "bay", "hills",
    // German.
    "der", "die", "das", "den", "dem", "des", "ein", "eine", "einen", "einem", "einer", "ich", "du",
    "er", "sie", "es", "wir", "ihr", "ihre", "ihnen", "mein", "meine", "unser", "unsere", "und",
    "oder", "aber", "wenn", "dann", "mit", "fur", "von", "vom", "zum", "zur", "bei", "nach", "auf",
    "aus", "im", "am", "an", "in", "bitte", "danke", "vielen", "dank", "gruss", "grusse",
    "herzliche", "freundlichen", "freundliche", "viele", "beste", "liebe", "lieber", "hallo",
    "sehr", "geehrte", "geehrter", "geehrtes", "guten", "tag", "morgen", "abend", "vertrag",
    "rechnung", "kunde", "kundin", "firma", "auftrag", "bestellung", "anfrage", "vertragsparteien",
    "partei", "mieter", "vermieter", "arbeitgeber", "arbeitnehmer", "gesellschaft",
    "geschaftsfuhrer", "leitung", "abteilung", "stadt", "strasse", "telefon", "adresse",
    "anschrift", "betreff", "datum", "ort", "unterschrift", "nummer", "konto", "zahlung", "betrag",
    "preis", "lieferung", "problem", "frage", "antwort", "hinweis", "ja", "nein", "nicht", "noch",
    "schon", "heute", "gestern", "woche", "monat", "jahr", "ihr", "euer", "man", "alle", "jede",
    "jeder", "dieser", "diese", "dieses",
    // French.
    "le", "la", "les", "un", "une", "des", "du", "de", "je", "tu", "il", "elle", "nous", "vous",
    "ils", "elles", "mon", "ma", "mes", "votre", "vos", "notre", "nos", "et", "ou", "mais", "si",
    "avec", "pour", "par", "sur", "sous", "dans", "chez", "bonjour", "bonsoir", "salut", "merci",
    "cordialement", "bien", "cher", "chere", "madame", "monsieur", "mademoiselle", "objet",
    "contrat", "facture", "client", "cliente", "societe", "entreprise", "commande", "demande",
    "service", "direction", "ville", "rue", "adresse", "telephone", "numero", "montant", "prix",
    "paiement", "livraison", "signature", "fait", "entre", "oui", "non", "pas", "tres",
    "aujourd'hui", "demain", "hier", "semaine", "mois", "annee", "ce", "cette", "ces", "cet", "qui",
    "que", "quoi", "comment", "alors", "donc", "voici", "interne", "notiz", "note", "kollege",
    "kollegin", "collegue", "colleague", "article", "preneur", "bailleur", "locataire", "vendeur",
    "acheteur", "prestataire",
];

/// Words that start place names ("West Kelly", "Port Christopher", "Saint-Malo"): a run
/// starting with one is a place, not a person. Elsewhere they may be surnames (`James West`).
#[rustfmt::skip]
const PLACE_PREFIXES: &[&str] = &[
    "north", "south", "east", "west", "new", "port", "lake", "mount", "fort", "saint", "sainte",
    "san", "santa", "st", "bad", "neu", "alt", "ober", "unter", "nieder",
];

/// Words that are names and ordinary words alike (months, virtues, verbs): they count as a
/// name part only next to an unambiguous one (`Erik May`, `August Zänker`), or after a
/// strong cue, and never right before a digit (`May 5`).
#[rustfmt::skip]
const AMBIGUOUS: &[&str] = &[
    "april", "may", "june", "august", "will", "mark", "grant", "bill", "rose", "hope", "joy",
    "faith", "dawn", "summer", "autumn", "winter", "art", "guy", "pat", "don", "ray", "sunny",
    "star", "sky", "king", "young", "white", "black", "brown", "green", "long", "love", "key",
    "bien", "blanc", "petit", "grand", "jeune", "koch", "bauer", "weiss", "klein", "lange", "west",
    "north", "south", "east", "rich", "price", "hall", "church", "page", "chase", "hunter",
    "golden", "wolf", "fuchs", "may", "morgen", "abend", "sommer",
];

/// Generational suffixes kept inside a name span.
const NAME_SUFFIXES: &[&str] = &["ii", "iii", "iv", "jr", "sr", "junior", "senior"];

/// The word lists above as hash sets, built once.
struct Lexicon {
    stop: HashSet<&'static str>,
    titles: HashSet<&'static str>,
    particles: HashSet<&'static str>,
    ambiguous: HashSet<&'static str>,
    name_suffixes: HashSet<&'static str>,
    company: HashSet<&'static str>,
    place_prefixes: HashSet<&'static str>,
    strong_cues: HashSet<&'static str>,
}

fn lexicon() -> &'static Lexicon {
    static LEXICON: std::sync::LazyLock<Lexicon> = std::sync::LazyLock::new(|| {
        let set = |words: &[&'static str]| words.iter().copied().collect();
        Lexicon {
            stop: set(STOP),
            titles: set(TITLES),
            particles: set(PARTICLES),
            ambiguous: set(AMBIGUOUS),
            name_suffixes: set(NAME_SUFFIXES),
            company: set(COMPANY_SUFFIXES),
            place_prefixes: set(PLACE_PREFIXES),
            strong_cues: set(STRONG_CUES),
        }
    });
    &LEXICON
}

#[derive(Debug, Clone)]
struct Token {
    start: usize,
    end: usize,
    folded: String,
    /// First letter upper case, some lower case after it (or a single letter).
    title_case: bool,
    /// Two or more letters, all upper case.
    all_caps: bool,
    /// First letter lower case.
    lower: bool,
    given: bool,
    surname: bool,
    stop: bool,
    title: bool,
    particle: bool,
    /// A single upper-case letter followed by `.`.
    initial: bool,
    /// Ends in an abbreviation dot that keeps the name going (`F.`, `Hans-H.`).
    dotted: bool,
    /// A month or virtue word that is also a name.
    ambiguous: bool,
    /// `II`, `Jr`...
    suffix: bool,
    company: bool,
    place_prefix: bool,
    /// An ordinary word of English, German or French (not a frequent name).
    common: bool,
}

impl Token {
    fn capitalised(&self) -> bool {
        self.title_case || self.all_caps
    }
}

fn tokenize(text: &str, gazetteer: &Gazetteer) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut iter = text.char_indices().peekable();
    while let Some((start, c)) = iter.next() {
        if !c.is_alphabetic() {
            continue;
        }
        let mut end = start + c.len_utf8();
        while let Some(&(i, d)) = iter.peek() {
            if d.is_alphabetic() {
                end = i + d.len_utf8();
                iter.next();
            } else if matches!(d, '\'' | '’' | '-') {
                // Joiner only between letters.
                let next = text[i + d.len_utf8()..].chars().next();
                if next.is_some_and(char::is_alphabetic) {
                    end = i + d.len_utf8();
                    iter.next();
                } else {
                    break;
                }
            } else {
                break;
            }
        }
        // Skip identifiers and code: words glued to digits, `_`, `@`, paths, backticks,
        // `::`, generics, calls (`Filter::new`, `Option<Filter>`, `my_Name`, `foo.Bar`).
        let before = text[..start].chars().next_back();
        let after = text[end..].chars().next();
        let after_rest = &text[end..];
        let before_dot_word =
            before == Some('.') && text[..start - 1].ends_with(|x: char| x.is_alphanumeric());
        if before.is_some_and(|b| {
            b.is_ascii_digit()
                || matches!(
                    b,
                    '_' | '@' | '/' | '\\' | '`' | '<' | '$' | '{' | '=' | '#' | '&' | '%'
                )
        }) || before_dot_word
            || text[..start].ends_with("::")
            || after.is_some_and(|a| {
                a.is_ascii_digit()
                    || matches!(
                        a,
                        '_' | '@' | '`' | '<' | '>' | '(' | '{' | '=' | '/' | '\\'
                    )
            })
            || after_rest.starts_with("::")
            || after_rest.starts_with(".")
                && after_rest[1..].starts_with(|c: char| c.is_alphabetic())
        {
            continue;
        }
        let word = &text[start..end];
        tokens.push(make_token(word, start, end, text, gazetteer));
    }
    tokens
}

fn make_token(word: &str, start: usize, end: usize, text: &str, gazetteer: &Gazetteer) -> Token {
    let mut chars = word.chars();
    let first = chars.next().unwrap_or(' ');
    let letters: Vec<char> = word.chars().filter(|c| c.is_alphabetic()).collect();
    let upper = letters.iter().filter(|c| c.is_uppercase()).count();
    let lowers = letters.len() - upper;
    let title_case = first.is_uppercase() && (lowers > 0 || letters.len() == 1);
    let all_caps = letters.len() >= 2 && lowers == 0;
    let folded = fold(word);
    let all_parts: Vec<&str> = folded.split(['-', '\'']).collect();
    let parts: Vec<&str> = all_parts.iter().copied().filter(|p| p.len() >= 2).collect();
    let has_digraph = |w: &str| w.contains("ae") || w.contains("oe") || w.contains("ue");
    let is_given = |w: &str| {
        gazetteer.given_folded(w) || has_digraph(w) && gazetteer.given_folded(&umlaut_fold(w))
    };
    let is_surname = |w: &str| {
        gazetteer.surname_folded(w) || has_digraph(w) && gazetteer.surname_folded(&umlaut_fold(w))
    };
    let given = is_given(&folded)
        || all_parts.len() > 1
            && !parts.is_empty()
            && parts
                .iter()
                .all(|p| is_given(p) || is_stop(p) && p.len() <= 2);
    let surname = is_surname(&folded)
        || all_parts.len() > 1 && parts.iter().any(|p| is_surname(p) && !is_stop(p));
    let dot_after = text[end..].starts_with('.');
    let last_part_letters = all_parts.last().map_or(0, |p| p.chars().count());
    let initial = dot_after && first.is_uppercase() && letters.len() == 1;
    let dotted = initial
        || dot_after && first.is_uppercase() && all_parts.len() > 1 && last_part_letters == 1;
    let digit_after = text[end..]
        .trim_start()
        .starts_with(|c: char| c.is_ascii_digit());
    let common = gazetteer.common_word_folded(&folded);
    let lex = lexicon();
    Token {
        start,
        end,
        title_case,
        all_caps,
        lower: first.is_lowercase(),
        given,
        surname,
        stop: is_stop(&folded) || digit_after && lex.ambiguous.contains(folded.as_str()),
        title: lex.titles.contains(folded.as_str()),
        particle: lex.particles.contains(folded.as_str()),
        initial,
        dotted,
        ambiguous: lex.ambiguous.contains(folded.as_str()) || common && (given || surname),
        suffix: lex.name_suffixes.contains(folded.as_str()),
        company: lex.company.contains(folded.as_str()),
        place_prefix: lex.place_prefixes.contains(folded.as_str()),
        common,
        folded,
    }
}

/// German transliteration folded back: `guenther` → `gunther`, `joerg` → `jorg`.
fn umlaut_fold(folded: &str) -> String {
    if !(folded.contains("ae") || folded.contains("oe") || folded.contains("ue")) {
        return folded.to_owned();
    }
    folded
        .replace("ae", "a")
        .replace("oe", "o")
        .replace("ue", "u")
}

fn is_stop(folded: &str) -> bool {
    lexicon().stop.contains(folded)
}

/// Whether the text after a name continues a company of names ("Turner, Estrada and Robinson").
fn is_name_list_company(after: &str) -> bool {
    let Some(rest) = after.strip_prefix(", ") else {
        return false;
    };
    let line = rest.split('\n').next().unwrap_or("");
    let words: Vec<&str> = line.split(' ').take(4).collect();
    matches!(words.as_slice(), [w, conj, v, ..]
        if w.starts_with(char::is_uppercase)
            && matches!(*conj, "and" | "und" | "et" | "&")
            && v.starts_with(char::is_uppercase))
}

/// Whether the text between two tokens keeps them in one name: spaces only (after an
/// initial or title, a `.` then spaces).
fn joins(text: &str, left: &Token, right: &Token) -> bool {
    let gap = &text[left.end..right.start];
    let gap = if left.dotted || left.title {
        gap.strip_prefix('.').unwrap_or(gap)
    } else {
        gap
    };
    !gap.is_empty() && gap.len() <= 2 && gap.chars().all(|c| c == ' ' || c == '\u{a0}')
}

/// Whether the folded `window` ends with `phrase` as whole words (ignoring spaces and
/// commas after it).
fn ends_with_phrase(window: &str, phrase: &str) -> bool {
    let w = window.trim_end_matches([' ', ',', '\t', '\u{a0}']);
    if !w.ends_with(phrase) {
        return false;
    }
    let before = &w[..w.len() - phrase.len()];
    !before
        .chars()
        .next_back()
        .is_some_and(char::is_alphanumeric)
}

/// Context cues around a candidate name.
struct Cues {
    /// A weak cue before it ("with", "by", "from", "asked").
    weak: bool,
    /// A greeting, introduction or person header before it ("Dear", "my name is", "To:").
    intro: bool,
    /// Any `label:` right before it on the line.
    label: bool,
    /// It is a speaker label (`Anna:` at the start of a line).
    speaker: bool,
    /// A speaker label after a timestamp (`[10:02] Anna:`), as in chat logs.
    chat_speaker: bool,
    /// It starts the line after a closing ("Best regards,").
    signature: bool,
    /// A cue after it (`<email>`, "wrote", "said").
    after: bool,
}

struct Candidate {
    /// Indices into the token list of the name tokens (titles and leading stop words removed).
    first: usize,
    last: usize,
    title_cue: bool,
    greeting_cue: bool,
}

impl Recognizer for PersonNameRecognizer {
    fn name(&self) -> &'static str {
        "person-name"
    }

    fn kinds(&self) -> &'static [EntityKind] {
        &[EntityKind::Person]
    }

    fn recognize(&self, text: &str, out: &mut Vec<Detection>) {
        let tokens = tokenize(text, &self.gazetteer);
        let lower_seen: HashSet<&str> = tokens
            .iter()
            .filter(|t| t.lower)
            .map(|t| t.folded.as_str())
            .collect();
        let mut accepted: Vec<(usize, usize, f32)> = Vec::new();
        let mut known_parts: HashSet<String> = HashSet::new();

        let mut i = 0;
        while i < tokens.len() {
            let t = &tokens[i];
            if !(t.capitalised() || t.title) {
                i += 1;
                continue;
            }
            // Collect a run of joined capitalised tokens (titles, particles, initials inside).
            let mut j = i;
            while j + 1 < tokens.len() && j + 1 - i < 7 {
                let next = &tokens[j + 1];
                if !joins(text, &tokens[j], next) {
                    break;
                }
                let particle_inside = next.particle
                    && j + 2 < tokens.len()
                    && joins(text, next, &tokens[j + 2])
                    && (tokens[j + 2].capitalised() || tokens[j + 2].particle);
                if next.capitalised() || next.title || particle_inside {
                    j += 1;
                } else {
                    break;
                }
            }
            // The run may start with a capitalised non-name ("Contact Jean Dupont",
            // "Kunde Hans Müller"): retry without up to four leading words.
            for skip in 0..5 {
                if i + skip > j {
                    break;
                }
                let Some(c) = self.strip(text, &tokens, i + skip, j) else {
                    continue;
                };
                if let Some(score) = self.score(text, &tokens, &c, &lower_seen) {
                    accepted.push((tokens[c.first].start, tokens[c.last].end, score));
                    let words = tokens[c.first..=c.last]
                        .iter()
                        .filter(|t| !t.particle && !t.initial)
                        .count();
                    if score >= 0.7 && words >= 2 {
                        for t in &tokens[c.first..=c.last] {
                            if !t.stop
                                && !t.particle
                                && !t.initial
                                && !t.common
                                && t.folded.chars().count() >= 3
                            {
                                known_parts.insert(t.folded.clone());
                            }
                        }
                    }
                    break;
                }
            }
            i = j + 1;
        }

        // Second pass: later mentions of parts of names already found.
        if !known_parts.is_empty() {
            let mut k = 0;
            while k < tokens.len() {
                let t = &tokens[k];
                if t.title_case && known_parts.contains(&t.folded) && !t.stop {
                    let mut e = k;
                    while e + 1 < tokens.len()
                        && tokens[e + 1].title_case
                        && known_parts.contains(&tokens[e + 1].folded)
                        && joins(text, &tokens[e], &tokens[e + 1])
                    {
                        e += 1;
                    }
                    let (s, end) = (tokens[k].start, tokens[e].end);
                    let company_next = tokens
                        .get(e + 1)
                        .is_some_and(|n| n.company && joins(text, &tokens[e], n));
                    if !company_next && !accepted.iter().any(|&(a, b, _)| a < end && s < b) {
                        accepted.push((s, end, 0.6));
                    }
                    k = e + 1;
                } else {
                    k += 1;
                }
            }
        }

        for (s, e, score) in accepted {
            out.push(Detection::new(EntityKind::Person, s, e, score, self.name()));
        }
    }
}

impl PersonNameRecognizer {
    /// Drops leading titles / greetings / stop words and trailing stop words from the run
    /// `i..=j`; notes the cues they give. None when the run is a company or a place.
    fn strip(&self, text: &str, tokens: &[Token], i: usize, mut j: usize) -> Option<Candidate> {
        // A company suffix inside the run: keep what precedes its last particle
        // ("Anna Dippel von der Geisel AG" → "Anna Dippel"), else it is a company.
        if let Some(k) = (i + 1..=j).find(|&k| tokens[k].company) {
            let cut = (i + 1..k)
                .rev()
                .find(|&p| tokens[p].particle && tokens[p].lower)?;
            j = (i..cut).rev().find(|&p| !tokens[p].particle)?;
        }
        let mut first = i;
        let mut last = j;
        let mut title_cue = false;
        let mut greeting_cue = false;
        while first <= last {
            let t = &tokens[first];
            if t.title && (t.folded.len() > 1 || text[t.end..].starts_with('.')) {
                // `M.` is a title only with its dot; `Me` (Maître) only capitalised.
                if t.folded == "me" && !t.title_case {
                    break;
                }
                title_cue = true;
                first += 1;
            } else if t.stop || t.particle && t.lower {
                if lexicon().strong_cues.contains(t.folded.as_str()) {
                    greeting_cue = true;
                }
                first += 1;
                title_cue = false;
            } else {
                break;
            }
        }
        if first > last {
            return None;
        }
        // Places: "West Kelly", "Port Christopher", "Saint-Malo".
        if tokens[first].place_prefix && !title_cue {
            return None;
        }
        let given_first = tokens[first].given && !tokens[first].stop && !tokens[first].ambiguous;
        while last > first {
            let t = &tokens[last];
            let keep_as_surname = t.surname && given_first && !t.particle && !t.title;
            if (t.stop && !keep_as_surname) || t.particle || t.title {
                last -= 1;
            } else {
                break;
            }
        }
        if tokens[last].stop && !(tokens[last].surname && given_first) {
            return None;
        }
        // A title before the run in lower case (`monsieur Dupont`, `herrn Müller`).
        if !title_cue && first > 0 {
            let p = &tokens[first - 1];
            if p.title && p.lower && joins(text, p, &tokens[first]) {
                title_cue = true;
            }
        }
        // Company or place suffix after the run.
        if let Some(next) = tokens.get(last + 1) {
            let gap = &text[tokens[last].end..next.start];
            let gap_ok = gap.len() <= 3 && gap.chars().all(|c| matches!(c, ' ' | '&' | ',' | '.'));
            if gap_ok && next.company {
                return None;
            }
        }
        if let (Some(conj), Some(next)) = (tokens.get(last + 1), tokens.get(last + 2)) {
            if matches!(conj.folded.as_str(), "and" | "und" | "et" | "y") && next.company {
                return None;
            }
        }
        let after = &text[tokens[last].end..];
        if after.starts_with(" &") || after.starts_with(" + ") || is_name_list_company(after) {
            return None;
        }
        let before = fold(crate::text::window_before(text, tokens[first].start, 24));
        if [
            "societe",
            "company",
            "firma",
            "entreprise",
            "unternehmen",
            "cabinet",
        ]
        .iter()
        .any(|w| ends_with_phrase(&before, w) || ends_with_phrase(&before, &format!("{w} der")))
        {
            return None;
        }
        Some(Candidate {
            first,
            last,
            title_cue,
            greeting_cue,
        })
    }

    fn score(
        &self,
        text: &str,
        tokens: &[Token],
        c: &Candidate,
        lower_seen: &HashSet<&str>,
    ) -> Option<f32> {
        let name: Vec<&Token> = tokens[c.first..=c.last]
            .iter()
            .filter(|t| (!t.particle || t.capitalised()) && !t.suffix)
            .collect();
        let n_words = name.iter().filter(|t| !t.initial).count();
        if n_words == 0 || n_words > 4 {
            return None;
        }
        let first = name[0];
        let last = name[name.len() - 1];
        // All-caps runs count only when fully known (headers like `INVOICE TOTAL`).
        if name.iter().any(|t| t.all_caps)
            && !name
                .iter()
                .filter(|t| !t.initial)
                .all(|t| t.given || t.surname)
        {
            return None;
        }
        let known = |t: &Token| (t.given || t.surname) && !t.stop && !t.ambiguous;
        let plausible_unknown = |t: &Token| {
            !t.stop
                && !t.ambiguous
                && !t.common
                && !t.company
                && !lower_seen.contains(t.folded.as_str())
                && t.folded.chars().count() >= 2
        };
        // Inner tokens: any name-like token; ambiguous ones are fine next to known ones.
        let given_first = first.given && !first.stop && !first.ambiguous;
        let part_ok = |t: &Token| {
            known(t)
                || plausible_unknown(t)
                || t.initial
                || t.particle
                || t.ambiguous && (t.given || t.surname)
                // "Jeffrey Best": a surname that is also a common word, after a given name.
                || t.surname && given_first && std::ptr::eq(t, last)
        };

        // After a title or a strong cue, a capitalised ordinary word can be a surname too
        // ("Herr Dr. Detlef Trüb", "An: Theda Müde"), like many German surnames.
        let lenient_ok = |t: &Token| part_ok(t) || t.title_case && !t.stop && !t.company;
        if c.title_cue {
            if name.iter().all(|t| lenient_ok(t)) && n_words <= 3 {
                return Some(0.9);
            }
            return None;
        }

        let cues = self.cue(text, tokens, c);
        let intro = cues.intro || c.greeting_cue;
        let strong = intro || cues.speaker || cues.signature || cues.after;
        let any_cue = cues.weak || strong || cues.label;
        if n_words >= 2 {
            let given_first = given_first && !first.common;
            let lenient = any_cue && given_first;
            if !name
                .iter()
                .all(|t| if lenient { lenient_ok(t) } else { part_ok(t) })
            {
                return None;
            }
            let any_known = name.iter().any(|t| known(t));
            if any_cue && any_known {
                return Some(0.85);
            }
            // After a greeting, a person header or in a signature ("An: Freia Täsche").
            if (intro || cues.signature)
                && name.iter().all(|t| t.title_case || t.initial || t.particle)
            {
                return Some(0.7);
            }
            if given_first {
                if last.surname && !last.particle && !last.ambiguous {
                    return Some(0.8);
                }
                if plausible_unknown(last) && last.title_case {
                    return Some(0.7);
                }
            }
            // "Will Smith", "August Zänker": an ambiguous given name before a surname.
            if first.given
                && first.ambiguous
                && (known(last) || plausible_unknown(last) && any_cue)
                && n_words == 2
            {
                return Some(0.65);
            }
            return None;
        }
        // A single word.
        if !first.title_case {
            return None;
        }
        if strong && (known(first) || first.ambiguous && first.given) {
            return Some(0.75);
        }
        if cues.label
            && first.given
            && !first.stop
            && !first.ambiguous
            && !lower_seen.contains(first.folded.as_str())
        {
            return Some(0.65);
        }
        if (intro || cues.signature || cues.chat_speaker) && plausible_unknown(first) {
            return Some(0.55);
        }
        None
    }

    /// The context cues around a candidate.
    fn cue(&self, text: &str, tokens: &[Token], c: &Candidate) -> Cues {
        let start = tokens[c.first].start;
        let end = tokens[c.last].end;
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let before_on_line = &text[line_start..start];
        let window = fold(crate::text::window_before(text, start, 40)).replace(" :", ":");
        let window = window.rsplit('\n').next().unwrap_or("");
        let intro = STRONG_CUES.iter().any(|p| ends_with_phrase(window, p));
        let weak = CUES_BEFORE.iter().any(|p| ends_with_phrase(window, p));

        let after = &text[end..];
        let after_line = after.split('\n').next().unwrap_or("");
        // Speaker label: nothing but punctuation, digits and spaces before it on the line,
        // and a colon right after (`[10:02] Anna Schmidt: ...`, `Anna: ...`).
        let prefix = before_on_line.trim_start();
        let speaker = !before_on_line.chars().any(char::is_alphabetic)
            && !prefix.starts_with(['#', '*', '-', '•', '/', '>', '|', '+'])
            && (after_line.starts_with(':') || after_line.starts_with(" :"));
        // `Anna Schmidt <anna@...>`, `Anna wrote:`, `Anna a écrit`.
        let after_folded =
            fold(&after_line[..crate::text::floor_boundary(after_line, after_line.len().min(24))]);
        let after_cue = after_line.starts_with(" <")
            || after_line.starts_with(" (") && after_line.contains('@')
            || [
                "wrote",
                "writes",
                "said",
                "says",
                "schrieb",
                "schreibt",
                "a ecrit",
                "ecrit",
                "replied",
                "commented",
            ]
            .iter()
            .any(|w| after_folded.trim_start().starts_with(w));
        // Signature: the run starts a line that follows a closing line.
        let signature = before_on_line.trim().is_empty() && {
            let prev_text = text[..line_start].trim_end();
            let prev_line = prev_text.rsplit('\n').next().unwrap_or("");
            let prev = fold(prev_line.trim().trim_end_matches([',', '!', '.', '-']));
            CLOSINGS
                .iter()
                .any(|c| prev == *c || prev.ends_with(&format!(" {c}")))
        };
        Cues {
            weak,
            intro,
            label: window.trim_end().ends_with(':'),
            speaker,
            chat_speaker: speaker && before_on_line.chars().any(|c| c.is_ascii_digit()),
            signature,
            after: after_cue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaz() -> Arc<Gazetteer> {
        Arc::new(Gazetteer::from_lists(
            [
                "John",
                "Rachel",
                "Hans",
                "Anna",
                "Jean",
                "Pierre",
                "Marie",
                "Will",
                "Grant",
                "Thérèse",
            ],
            [
                "Smith", "Davis", "Muller", "Schmidt", "Dupont", "Gall", "Fontaine", "Grant",
                "Brown",
            ],
        ))
    }

    fn find(t: &str) -> Vec<String> {
        let mut out = Vec::new();
        PersonNameRecognizer::new(gaz()).recognize(t, &mut out);
        let resolved = super::super::resolve(t, out, &[], 0.5);
        resolved
            .iter()
            .map(|d| t[d.start..d.end].to_owned())
            .collect()
    }

    #[test]
    fn full_names() {
        assert_eq!(find("Meeting with Rachel Davis today."), ["Rachel Davis"]);
        assert_eq!(
            find("Signed: Hans Müller-Lüdenscheidt"),
            ["Hans Müller-Lüdenscheidt"]
        );
        assert_eq!(
            find("Contact Jean-Pierre de la Fontaine now"),
            ["Jean-Pierre de la Fontaine"]
        );
        assert_eq!(find("Thérèse Le Gall a appelé"), ["Thérèse Le Gall"]);
        assert_eq!(find("John F. Smith"), ["John F. Smith"]);
    }

    #[test]
    fn cues() {
        assert_eq!(find("Dear Rachel,\nthanks"), ["Rachel"]);
        assert_eq!(find("Sehr geehrter Herr Oderwald,"), ["Oderwald"]);
        assert_eq!(find("Bonjour Mme Dubois-Martin,"), ["Dubois-Martin"]);
        assert_eq!(find("Best regards,\nAnna\n"), ["Anna"]);
        assert_eq!(find("[10:02] Anna: hi\n[10:03] John: ok"), ["Anna", "John"]);
        assert_eq!(find("My name is Pierre."), ["Pierre"]);
    }

    #[test]
    fn propagation() {
        assert_eq!(
            find("Rachel Davis signed. Later Davis called."),
            ["Rachel Davis", "Davis"]
        );
    }

    #[test]
    fn not_names() {
        assert!(find("The Smith Group Inc. agreed.").is_empty());
        assert!(find("Schmidt GmbH liefert").is_empty());
        assert!(find("On Monday the Customer Service Team met.").is_empty());
        assert!(find("Will you come? Grant Agreement attached").is_empty());
        assert!(find("the Rachel line").is_empty());
        assert_eq!(find("Rachel said hi"), ["Rachel"]);
    }
}
