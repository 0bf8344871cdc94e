#!/usr/bin/env python3
"""Seeded PII evaluation corpus with gold spans (Faker; en_US, de_DE, fr_FR).

Genres: e-mails, contracts, chat logs, support tickets, code/config with secrets.
Every value that is PII is inserted through `Doc.ent`, which records its gold span
(character offsets, as Python counts them). Hard negatives (dates that are not birth
dates, order numbers, versions, hashes, UUIDs, public URLs, company and city names,
Luhn-invalid digit groups, `${VAR}` references) are inserted as plain text; company
names are recorded as ORG spans, which the evaluation treats as neutral for PERSON.

Realism filters (documented in docs/privacy.md): phone numbers are redrawn until
libphonenumber (`phonenumbers`, installed with presidio-analyzer) says they are valid for
the locale's country, since Faker draws random digits and real numbers are valid.

Usage: gen_corpus.py --seed 7 --docs 40 --out bench/privacy/corpus.jsonl
  (--docs is per locale and genre: 3 locales x 5 genres x docs documents)
"""

import argparse
import base64
import datetime as dt
import json
import random
import string

import phonenumbers
from faker import Faker

LOCALES = {"en_US": "US", "de_DE": "DE", "fr_FR": "FR"}
GENRES = ["email", "contract", "chat", "ticket", "code"]

MONTHS = {
    "en_US": ["January", "February", "March", "April", "May", "June", "July", "August",
              "September", "October", "November", "December"],
    "de_DE": ["Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August",
              "September", "Oktober", "November", "Dezember"],
    "fr_FR": ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août",
              "septembre", "octobre", "novembre", "décembre"],
}


class Doc:
    """Text under construction with gold spans."""

    def __init__(self):
        self.parts = []
        self.len = 0
        self.spans = []

    def add(self, text):
        self.parts.append(text)
        self.len += len(text)
        return self

    def ent(self, etype, value):
        self.spans.append({"start": self.len, "end": self.len + len(value), "type": etype, "value": value})
        return self.add(value)

    def text(self):
        return "".join(self.parts)


class Gen:
    def __init__(self, locale, seed):
        self.locale = locale
        self.region = LOCALES[locale]
        self.f = Faker(locale)
        self.f.seed_instance(seed)
        self.r = random.Random(seed * 7919 + 17)
        self.en = Faker("en_US")  # for locale-neutral things (user names, domains)
        self.en.seed_instance(seed + 1)

    # ---------- values ----------
    def first(self):
        return self.f.first_name()

    def last(self):
        return self.f.last_name()

    def full(self):
        return f"{self.first()} {self.last()}"

    def phone(self):
        for _ in range(60):
            p = self.f.phone_number()
            try:
                if phonenumbers.is_valid_number(phonenumbers.parse(p, self.region)):
                    return p
            except phonenumbers.NumberParseException:
                pass
        return {"US": "+1 650-253-0000", "DE": "+49 30 901820", "FR": "+33 1 42 68 53 00"}[self.region]

    def email(self, name=None):
        if name and self.r.random() < 0.6:
            user = "".join(c for c in name.lower().replace(" ", ".") if c.isascii() and (c.isalnum() or c == "."))
            user = user.strip(".") or self.en.user_name()
            return f"{user}@{self.f.free_email_domain() if self.r.random() < 0.5 else self.en.domain_name()}"
        return self.f.email()

    def card(self):
        ctype = self.r.choice(["visa16", "mastercard", "amex", "discover", "visa16", "mastercard"])
        n = self.f.credit_card_number(card_type=ctype)
        if self.r.random() < 0.5:
            if len(n) == 15:
                n = f"{n[:4]} {n[4:10]} {n[10:]}"
            else:
                n = " ".join(n[i:i + 4] for i in range(0, len(n), 4))
        return n

    def iban(self):
        i = self.f.iban()
        if self.r.random() < 0.5:
            i = " ".join(i[k:k + 4] for k in range(0, len(i), 4))
        return i

    def ip(self):
        c = self.r.random()
        if c < 0.45:
            return self.f.ipv4_public()
        if c < 0.75:
            return self.f.ipv4_private()
        return self.f.ipv6()

    def address(self):
        a = self.f.address()
        return a if self.r.random() < 0.6 else a.replace("\n", ", ")

    def dob(self):
        d = self.f.date_of_birth(minimum_age=18, maximum_age=90)
        style = self.r.random()
        m = MONTHS[self.locale][d.month - 1]
        if self.locale == "en_US":
            return d.strftime("%m/%d/%Y") if style < 0.4 else (d.isoformat() if style < 0.6 else f"{m} {d.day}, {d.year}")
        if self.locale == "de_DE":
            return d.strftime("%d.%m.%Y") if style < 0.6 else f"{d.day}. {m} {d.year}"
        return d.strftime("%d/%m/%Y") if style < 0.6 else f"{'1er' if d.day == 1 else d.day} {m} {d.year}"

    def any_date(self):
        d = self.f.date_between(start_date="-2y", end_date="+1y")
        if self.locale == "en_US":
            return d.strftime("%m/%d/%Y") if self.r.random() < 0.5 else d.strftime("%B %d, %Y")
        if self.locale == "de_DE":
            return d.strftime("%d.%m.%Y")
        return d.strftime("%d/%m/%Y")

    def rand(self, alphabet, n):
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def secret(self):
        an = string.ascii_letters + string.digits
        kind = self.r.choice(["openai", "anthropic", "github", "gitlab", "slack", "stripe", "aws", "jwt"])
        if kind == "openai":
            return self.r.choice(["sk-proj-", "sk-"]) + self.rand(an + "_-", 48)
        if kind == "anthropic":
            return "sk-ant-api03-" + self.rand(an + "_-", 93) + "AA"
        if kind == "github":
            return self.r.choice(["ghp_", "gho_", "ghs_"]) + self.rand(an, 36)
        if kind == "gitlab":
            return "glpat-" + self.rand(an + "_-", 20)
        if kind == "slack":
            return f"xoxb-{self.rand(string.digits, 12)}-{self.rand(string.digits, 13)}-{self.rand(an, 24)}"
        if kind == "stripe":
            return self.r.choice(["sk_live_", "sk_test_", "rk_live_"]) + self.rand(an, 24)
        if kind == "aws":
            return "AKIA" + self.rand(string.ascii_uppercase + string.digits, 16)
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
        payload = base64.urlsafe_b64encode(
            json.dumps({"sub": str(self.r.randint(1000, 99999)), "name": "x", "iat": 1700000000}).encode()
        ).rstrip(b"=").decode()
        return f"{header}.{payload}.{self.rand(an + '_-', 43)}"

    def password(self):
        return self.f.password(length=self.r.randint(10, 16))

    def pem(self):
        body = "\n".join(self.rand(string.ascii_letters + string.digits + "+/", 64) for _ in range(self.r.randint(3, 6)))
        kind = self.r.choice(["RSA ", "EC ", "", "OPENSSH "])
        return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"

    def cred_url(self):
        scheme = self.r.choice(["postgres", "mysql", "mongodb", "redis", "https", "amqp"])
        user = self.en.user_name()
        pw = self.rand(string.ascii_letters + string.digits, self.r.randint(10, 18))
        host = self.r.choice([self.en.domain_name(), f"db{self.r.randint(1, 9)}.internal", self.f.ipv4_private()])
        return f"{scheme}://{user}:{pw}@{host}:{self.r.choice([5432, 3306, 27017, 6379, 443, 5672])}/{self.en.word()}"

    # ---------- negatives ----------
    def order_no(self):
        return self.r.choice([f"#{self.r.randint(100000, 999999)}", f"INV-{self.r.randint(2020, 2026)}-{self.r.randint(1000, 9999)}",
                              f"{self.r.randint(10**9, 10**10 - 1)}", f"A{self.r.randint(10**6, 10**7)}"])

    def version(self):
        return f"{self.r.randint(0, 12)}.{self.r.randint(0, 30)}.{self.r.randint(0, 99)}"

    def amount(self):
        v = self.r.randint(50, 250000) / 100
        return {"en_US": f"${v:,.2f}", "de_DE": f"{v:.2f} €".replace(".", ","), "fr_FR": f"{v:.2f} €".replace(".", ",")}[self.locale]

    def fake_card(self):
        # 16 digits that fail Luhn.
        while True:
            n = self.rand(string.digits, 16)
            s = sum(int(d) if i % 2 else (2 * int(d) - 9 if int(d) > 4 else 2 * int(d)) for i, d in enumerate(n))
            if s % 10:
                return " ".join(n[i:i + 4] for i in range(0, 16, 4))

    def company(self, doc):
        doc.ent("ORG", self.f.company())

    def title(self, female=None):
        if self.locale == "en_US":
            return self.r.choice(["Mr.", "Ms.", "Mrs.", "Dr."])
        if self.locale == "de_DE":
            return self.r.choice(["Herr", "Frau", "Dr.", "Herr Dr.", "Frau Prof."])
        return self.r.choice(["M.", "Mme", "Monsieur", "Madame", "Maître"])


# ---------------- phrase tables ----------------
P = {
    "en_US": dict(
        greet=["Dear {n},", "Hi {n},", "Hello {n},", "Good morning {n},"],
        close=["Best regards,", "Kind regards,", "Thanks,", "Cheers,", "Sincerely,"],
        subject="Subject: ", from_="From: ", to="To: ",
        lines=[
            "I hope this message finds you well.",
            "Following up on our call on {date}, please find the updated proposal attached.",
            "The invoice {order} for {amount} is still open.",
            "We moved the Berlin kick-off to next Monday.",
            "Could you check the figures in the Q3 report before Friday?",
            "Our release {version} ships with the new export feature.",
            "Let me know if anything is unclear.",
            "Customer Success will follow up after the Quarterly Business Review on Thursday.",
            "Please upload the files to Google Drive or Microsoft Teams.",
            "Our office in San Francisco is closed on Memorial Day.",
        ],
        pii=[
            "You can reach me at {phone} or {email}.",
            "Please wire the deposit to IBAN {iban}.",
            "My colleague {name} will join the meeting.",
            "I spoke with {name} from {org} yesterday.",
            "Please ship the samples to:\n{address}",
            "For the background check: date of birth {dob}, SSN {ssn}.",
            "The card on file ends in a different number, please use {card}.",
            "Our VPN gateway is {ip}.",
            "{name} confirmed the booking for next week.",
            "The report was reviewed by {name} and approved.",
        ],
        contract=dict(
            title="SERVICE AGREEMENT",
            parties="This Agreement is entered into on {date} between {org} (\"Provider\") and {name}, residing at {address} (\"Client\").",
            rep="The Provider is represented by {title} {name2}, Managing Director.",
            born="The Client, born on {dob}, confirms the accuracy of the information provided.",
            pay="Payments of {amount} are due monthly to account {iban}.",
            contact="Notices shall be sent to {email} or by phone to {phone}.",
            clauses=["1. Scope. The Provider shall deliver the services described in Schedule A.",
                     "2. Term. This Agreement remains in force for twelve (12) months.",
                     "3. Confidentiality. Each party shall keep the other party's information confidential.",
                     "4. Governing Law. This Agreement is governed by the laws of the State of New York."],
            sign="Signed:\n\n______________________\n{name}\n\n______________________\n{title} {name2}",
            ssn="Client SSN: {ssn}",
        ),
        chat=dict(
            lines=["hey, are you around?", "yes, what's up", "can you send me the login for the staging box?",
                   "sure, one sec", "thanks!", "the deploy of {version} failed again", "did you restart it?",
                   "lunch at 12:30?", "I'll be 10 minutes late", "ok np"],
            pii=["my number is {phone} if the call drops", "send it to {email}", "the server is at {ip}",
                 "password is {password}", "ask {name}, she set it up", "{name} said the invoice {order} is paid",
                 "{name} is out until Monday",
                 "here's the token: {secret}"],
        ),
        ticket=dict(
            head="Ticket {order}\nPriority: High\nStatus: Open\nCustomer: {name}\nEmail: {email}\nPhone: {phone}\n",
            body=["Customer reports that the export fails since version {version}.",
                  "Error code 0x80070005 appears after login.",
                  "Steps to reproduce: open Settings > Billing, click Save.",
                  "Order placed on {date}, amount {amount}."],
            pii=["The customer's card {card} was charged twice.", "Billing address:\n{address}",
                 "Customer's date of birth: {dob}.", "Refund to IBAN {iban} requested.",
                 "Request came from IP {ip}.", "Assigned to {name2}.",
                 "{name2} escalated this to level 2."],
            note="Internal note: {name2} called the customer back on {date}.",
        ),
    ),
    "de_DE": dict(
        greet=["Sehr geehrte Damen und Herren,", "Hallo {n},", "Liebe {n},", "Guten Tag {n},"],
        close=["Mit freundlichen Grüßen", "Viele Grüße", "Beste Grüße", "Herzliche Grüße"],
        subject="Betreff: ", from_="Von: ", to="An: ",
        lines=[
            "vielen Dank für Ihre Nachricht.",
            "wie am {date} besprochen, sende ich Ihnen das überarbeitete Angebot.",
            "Die Rechnung {order} über {amount} ist noch offen.",
            "Das Projekttreffen in Hamburg wurde auf Dienstag verschoben.",
            "Bitte prüfen Sie die Zahlen im Quartalsbericht bis Freitag.",
            "Version {version} enthält die neue Exportfunktion.",
            "Bei Fragen melden Sie sich gerne.",
            "Der Kundenservice meldet sich nach dem Jahresgespräch am Donnerstag.",
            "Bitte laden Sie die Dateien in Google Drive oder Microsoft Teams hoch.",
            "Unser Büro in Frankfurt am Main bleibt am Brückentag geschlossen.",
        ],
        pii=[
            "Sie erreichen mich unter {phone} oder per E-Mail an {email}.",
            "Bitte überweisen Sie die Anzahlung auf das Konto IBAN {iban}.",
            "Mein Kollege {name} nimmt ebenfalls teil.",
            "Ich habe gestern mit {name} von der {org} gesprochen.",
            "Bitte senden Sie die Unterlagen an:\n{address}",
            "Für die Anmeldung: geboren am {dob}.",
            "Bitte belasten Sie die Kreditkarte {card}.",
            "Unser VPN-Gateway hat die Adresse {ip}.",
            "{name} hat die Buchung für nächste Woche bestätigt.",
            "Den Bericht hat {name} geprüft und freigegeben.",
        ],
        contract=dict(
            title="DIENSTLEISTUNGSVERTRAG",
            parties="Zwischen der {org} (nachfolgend „Auftragnehmer“) und {name}, wohnhaft {address} (nachfolgend „Auftraggeber“), wird am {date} folgender Vertrag geschlossen:",
            rep="Der Auftragnehmer wird vertreten durch {title} {name2}, Geschäftsführer.",
            born="Der Auftraggeber, geboren am {dob}, bestätigt die Richtigkeit seiner Angaben.",
            pay="Die monatliche Vergütung von {amount} ist auf das Konto {iban} zu zahlen.",
            contact="Mitteilungen erfolgen an {email} oder telefonisch unter {phone}.",
            clauses=["§ 1 Vertragsgegenstand. Der Auftragnehmer erbringt die in Anlage A beschriebenen Leistungen.",
                     "§ 2 Laufzeit. Der Vertrag läuft zwölf Monate.",
                     "§ 3 Vertraulichkeit. Beide Parteien behandeln Informationen vertraulich.",
                     "§ 4 Gerichtsstand ist München."],
            sign="Unterschriften:\n\n______________________\n{name}\n\n______________________\n{title} {name2}",
            ssn=None,
        ),
        chat=dict(
            lines=["hey, bist du da?", "ja, was gibt's", "kannst du mir den Zugang zum Testserver schicken?",
                   "klar, Moment", "danke!", "das Deployment von {version} ist wieder fehlgeschlagen",
                   "hast du neu gestartet?", "Mittagessen um 12:30?", "bin 10 Minuten später da", "ok passt"],
            pii=["meine Nummer ist {phone}, falls der Anruf abbricht", "schick es an {email}", "der Server ist {ip}",
                 "das Passwort ist {password}", "frag {name}, sie hat das eingerichtet",
                 "{name} sagt, die Rechnung {order} ist bezahlt", "{name} ist bis Montag weg", "hier der Token: {secret}"],
        ),
        ticket=dict(
            head="Ticket {order}\nPriorität: Hoch\nStatus: Offen\nKunde: {name}\nE-Mail: {email}\nTelefon: {phone}\n",
            body=["Der Kunde meldet, dass der Export seit Version {version} fehlschlägt.",
                  "Nach dem Login erscheint Fehlercode 0x80070005.",
                  "Schritte: Einstellungen > Abrechnung öffnen, Speichern klicken.",
                  "Bestellung vom {date}, Betrag {amount}."],
            pii=["Die Karte {card} des Kunden wurde doppelt belastet.", "Rechnungsadresse:\n{address}",
                 "Geburtsdatum des Kunden: {dob}.", "Erstattung auf IBAN {iban} angefordert.",
                 "Die Anfrage kam von IP {ip}.", "Zugewiesen an {name2}.",
                 "{name2} hat das Ticket an Level 2 eskaliert."],
            note="Interne Notiz: {name2} hat den Kunden am {date} zurückgerufen.",
        ),
    ),
    "fr_FR": dict(
        greet=["Madame, Monsieur,", "Bonjour {n},", "Cher {n},", "Bonjour {n},"],
        close=["Cordialement,", "Bien cordialement,", "Bien à vous,", "Merci,"],
        subject="Objet : ", from_="De : ", to="À : ",
        lines=[
            "merci pour votre message.",
            "suite à notre échange du {date}, veuillez trouver ci-joint la proposition mise à jour.",
            "La facture {order} d'un montant de {amount} reste impayée.",
            "La réunion de lancement à Lyon est reportée à mardi.",
            "Pourriez-vous vérifier les chiffres du rapport trimestriel avant vendredi ?",
            "La version {version} inclut la nouvelle fonction d'export.",
            "N'hésitez pas à revenir vers moi.",
            "Le Service Client vous recontactera après la Revue Trimestrielle de jeudi.",
            "Merci de déposer les fichiers sur Google Drive ou Microsoft Teams.",
            "Notre bureau de Saint-Étienne est fermé le lundi de Pâques.",
        ],
        pii=[
            "Vous pouvez me joindre au {phone} ou à {email}.",
            "Merci de virer l'acompte sur l'IBAN {iban}.",
            "Mon collègue {name} participera à la réunion.",
            "J'ai parlé hier avec {name} de la société {org}.",
            "Merci d'envoyer les documents à :\n{address}",
            "Pour le dossier : date de naissance {dob}, numéro de sécurité sociale {nir}.",
            "Merci de débiter la carte {card}.",
            "Notre passerelle VPN est {ip}.",
            "{name} a confirmé la réservation pour la semaine prochaine.",
            "Le rapport a été relu et validé par {name}.",
        ],
        contract=dict(
            title="CONTRAT DE PRESTATION DE SERVICES",
            parties="Entre la société {org} (ci-après « le Prestataire ») et {name}, demeurant {address} (ci-après « le Client »), il est convenu ce qui suit, le {date} :",
            rep="Le Prestataire est représenté par {title} {name2}, gérant.",
            born="Le Client, né le {dob}, certifie l'exactitude des informations fournies.",
            pay="Les paiements de {amount} sont dus mensuellement sur le compte {iban}.",
            contact="Les notifications sont envoyées à {email} ou par téléphone au {phone}.",
            clauses=["Article 1 – Objet. Le Prestataire fournit les services décrits en annexe A.",
                     "Article 2 – Durée. Le contrat est conclu pour douze mois.",
                     "Article 3 – Confidentialité. Chaque partie garde les informations de l'autre confidentielles.",
                     "Article 4 – Juridiction. Tribunal de commerce de Paris."],
            sign="Signatures :\n\n______________________\n{name}\n\n______________________\n{title} {name2}",
            ssn="Numéro de sécurité sociale du Client : {nir}",
        ),
        chat=dict(
            lines=["salut, t'es là ?", "oui, quoi de neuf", "tu peux m'envoyer l'accès au serveur de test ?",
                   "bien sûr, une seconde", "merci !", "le déploiement de {version} a encore échoué",
                   "tu as redémarré ?", "déjeuner à 12h30 ?", "j'aurai 10 minutes de retard", "ok pas de souci"],
            pii=["mon numéro c'est le {phone} si ça coupe", "envoie-le à {email}", "le serveur est {ip}",
                 "le mot de passe est {password}", "demande à {name}, c'est elle qui l'a installé",
                 "{name} dit que la facture {order} est payée", "{name} est absent jusqu'à lundi", "voici le token : {secret}"],
        ),
        ticket=dict(
            head="Ticket {order}\nPriorité : Haute\nStatut : Ouvert\nClient : {name}\nE-mail : {email}\nTéléphone : {phone}\n",
            body=["Le client signale que l'export échoue depuis la version {version}.",
                  "Le code d'erreur 0x80070005 apparaît après la connexion.",
                  "Étapes : ouvrir Paramètres > Facturation, cliquer sur Enregistrer.",
                  "Commande du {date}, montant {amount}."],
            pii=["La carte {card} du client a été débitée deux fois.", "Adresse de facturation :\n{address}",
                 "Date de naissance du client : {dob}.", "Remboursement demandé sur l'IBAN {iban}.",
                 "La demande provient de l'IP {ip}.", "Assigné à {name2}.",
                 "{name2} a escaladé le ticket au niveau 2."],
            note="Note interne : {name2} a rappelé le client le {date}.",
        ),
    ),
}


def fill(g, doc, template, ctx):
    """Writes `template`, turning `{slot}`s into entities or plain values."""
    i = 0
    while i < len(template):
        j = template.find("{", i)
        if j < 0:
            doc.add(template[i:])
            break
        doc.add(template[i:j])
        k = template.index("}", j)
        slot = template[j + 1:k]
        i = k + 1
        put_slot(g, doc, slot, ctx)


def put_slot(g, doc, slot, ctx):
    ent = {
        "phone": ("PHONE", g.phone), "email": ("EMAIL", lambda: g.email(ctx.get("name"))),
        "iban": ("IBAN", g.iban), "card": ("CARD", g.card), "ip": ("IP", g.ip),
        "address": ("ADDRESS", g.address), "dob": ("DATE_OF_BIRTH", g.dob),
        "ssn": ("SSN", g.f.ssn), "nir": ("NATIONAL_ID", g.f.ssn), "secret": ("SECRET", g.secret),
        "password": ("SECRET", g.password),
    }
    plain = {"date": g.any_date, "order": g.order_no, "amount": g.amount, "version": g.version,
             "title": lambda: ctx.setdefault("title", g.title())}
    if slot in ("name", "name2", "n"):
        key = {"n": "first"}.get(slot, slot)
        if slot == "n":
            value = ctx.setdefault("first", g.first())
        else:
            value = ctx.setdefault(key, g.full())
        doc.ent("PERSON", value)
    elif slot == "org":
        g.company(doc)
    elif slot in ent:
        etype, fn = ent[slot]
        doc.ent(etype, fn())
    elif slot in plain:
        doc.add(plain[slot]())
    else:
        raise KeyError(slot)


def gen_email(g, L):
    doc, ctx = Doc(), {}
    sender, rcpt_first, rcpt_last = g.full(), g.first(), g.last()
    doc.add(L["from_"]).ent("PERSON", sender).add(" <").ent("EMAIL", g.email(sender)).add(">\n")
    doc.add(L["to"]).ent("PERSON", f"{rcpt_first} {rcpt_last}").add("\n")
    doc.add(L["subject"] + g.r.choice(["Re: ", "", "Fwd: "]) + g.r.choice(["Project update", "Angebot", "Proposition", "Q3"]) + "\n\n")
    greet = g.r.choice(L["greet"])
    ctx["first"] = rcpt_first
    fill(g, doc, greet, ctx)
    doc.add("\n\n")
    body = g.r.sample(L["lines"], 3) + g.r.sample(L["pii"], 3)
    g.r.shuffle(body)
    for line in body:
        c = {}
        fill(g, doc, line, c)
        doc.add(" " if g.r.random() < 0.6 else "\n")
    doc.add("\n\n" + g.r.choice(L["close"]) + "\n")
    if g.r.random() < 0.5:
        doc.ent("PERSON", sender.split(" ")[0])
    else:
        doc.ent("PERSON", sender)
    doc.add("\n")
    if g.r.random() < 0.5:
        doc.add(g.f.job() + " | ")
        g.company(doc)
        doc.add("\nTel. ").ent("PHONE", g.phone()).add("\n")
    return doc


def gen_contract(g, L):
    C = L["contract"]
    doc, ctx = Doc(), {}
    doc.add(C["title"] + "\n\n")
    fill(g, doc, C["parties"], ctx)
    doc.add("\n\n")
    fill(g, doc, C["rep"], ctx)
    doc.add("\n")
    fill(g, doc, C["born"], ctx)
    doc.add("\n")
    if C["ssn"] and g.r.random() < 0.7:
        fill(g, doc, C["ssn"], ctx)
        doc.add("\n")
    for clause in C["clauses"]:
        doc.add(clause + "\n")
    fill(g, doc, C["pay"], ctx)
    doc.add("\n")
    fill(g, doc, C["contact"], ctx)
    doc.add("\n\n")
    fill(g, doc, C["sign"], ctx)
    doc.add("\n")
    return doc


def gen_chat(g, L):
    C = L["chat"]
    doc = Doc()
    people = [g.first(), g.first()]
    if g.r.random() < 0.5:
        people = [f"{p} {g.last()}" for p in people]
    t = dt.datetime(2024, 1, 1, 9, 0) + dt.timedelta(minutes=g.r.randint(0, 500000))
    lines = g.r.sample(C["lines"], 6) + g.r.sample(C["pii"], 3)
    g.r.shuffle(lines)
    for k, line in enumerate(lines):
        t += dt.timedelta(seconds=g.r.randint(5, 400))
        style = k % 2
        doc.add(f"[{t:%H:%M}] ").ent("PERSON", people[style]).add(": ")
        fill(g, doc, line, {})
        doc.add("\n")
    return doc


def gen_ticket(g, L):
    C = L["ticket"]
    doc, ctx = Doc(), {}
    fill(g, doc, C["head"], ctx)
    doc.add("\n")
    body = g.r.sample(C["body"], 3) + g.r.sample(C["pii"], 3)
    g.r.shuffle(body)
    for line in body:
        fill(g, doc, line, ctx)
        doc.add("\n")
    fill(g, doc, C["note"], ctx)
    doc.add("\n")
    if g.r.random() < 0.5:
        doc.add("Card check: " + g.fake_card() + " (declined, invalid)\n")
    return doc


def gen_code(g, L):
    doc = Doc()
    style = g.r.choice(["env", "python", "yaml", "json", "shell"])
    name = g.full()
    if style == "env":
        doc.add(f"# .env for {g.en.word()}-service, maintainer: ").ent("PERSON", name).add("\n")
        doc.add(f"APP_VERSION={g.version()}\nLOG_LEVEL=info\nDATABASE_URL=").ent("URL", g.cred_url()).add("\n")
        doc.add("OPENAI_API_KEY=").ent("SECRET", g.secret()).add("\n")
        doc.add("SMTP_PASSWORD=").ent("SECRET", g.password()).add("\n")
        doc.add("SENTRY_DSN=${SENTRY_DSN}\nBUILD_SHA=" + g.f.sha1() + "\n")
        doc.add("ADMIN_EMAIL=").ent("EMAIL", g.email(name)).add("\n")
    elif style == "python":
        doc.add(f'"""Client for the billing API.\n\nAuthor: ').ent("PERSON", name).add(" <").ent("EMAIL", g.email(name)).add(">\n\"\"\"\n")
        doc.add("import os\nimport requests\n\n")
        doc.add("API_KEY = \"").ent("SECRET", g.secret()).add("\"\n")
        doc.add("FALLBACK_TOKEN = os.environ.get(\"FALLBACK_TOKEN\")\n")
        doc.add(f"REQUEST_ID = \"{g.f.uuid4()}\"\n")
        doc.add("DB = \"").ent("URL", g.cred_url()).add("\"\n\n")
        doc.add("def fetch(invoice_id):\n    headers = {\"Authorization\": f\"Bearer {API_KEY}\"}\n")
        doc.add(f"    return requests.get(f\"https://api.example.com/v{g.r.randint(1, 3)}/invoices/{{invoice_id}}\", headers=headers, timeout=30)\n")
    elif style == "yaml":
        doc.add("# deploy config\nservice:\n  name: billing\n  image: registry.example.com/billing:" + g.version() + "\n")
        doc.add("  owner: ").ent("PERSON", name).add("\n")
        doc.add("  host: ").ent("IP", g.ip()).add("\n")
        doc.add("database:\n  user: app\n  password: ").ent("SECRET", g.password()).add("\n")
        doc.add("stripe:\n  secret_key: ").ent("SECRET", g.secret()).add("\n")
        doc.add("  webhook_url: https://example.com/hooks/stripe\n")
    elif style == "json":
        doc.add("{\n  \"service\": \"crm-sync\",\n  \"version\": \"" + g.version() + "\",\n")
        doc.add("  \"contact\": \"").ent("EMAIL", g.email(name)).add("\",\n")
        doc.add("  \"client_secret\": \"").ent("SECRET", g.rand(string.ascii_letters + string.digits, 32)).add("\",\n")
        doc.add("  \"github_token\": \"").ent("SECRET", g.secret()).add("\",\n")
        doc.add("  \"retry\": 3,\n  \"commit\": \"" + g.f.sha1() + "\"\n}\n")
    else:
        doc.add("#!/bin/sh\n# rotate keys - ").ent("PERSON", name).add(", " + g.any_date() + "\n")
        doc.add("export AWS_ACCESS_KEY_ID=").ent("SECRET", "AKIA" + g.rand(string.ascii_uppercase + string.digits, 16)).add("\n")
        doc.add("export AWS_SECRET_ACCESS_KEY=").ent("SECRET", g.rand(string.ascii_letters + string.digits + "/+", 40)).add("\n")
        doc.add("ssh deploy@").ent("IP", g.ip()).add(" 'systemctl restart app'\n")
        doc.add("curl -H \"Authorization: Bearer ").ent("SECRET", g.secret()).add("\" https://api.example.com/v1/keys\n")
    if g.r.random() < 0.35:
        doc.add("\n# deploy key\n").ent("SECRET", g.pem()).add("\n")
    return doc


GEN = {"email": gen_email, "contract": gen_contract, "chat": gen_chat, "ticket": gen_ticket, "code": gen_code}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--docs", type=int, default=40, help="documents per locale and genre")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    n = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for li, locale in enumerate(LOCALES):
            for gi, genre in enumerate(GENRES):
                for k in range(args.docs):
                    g = Gen(locale, args.seed * 1_000_003 + li * 10_007 + gi * 101 + k)
                    doc = GEN[genre](g, P[locale])
                    text = doc.text()
                    for s in doc.spans:
                        assert text[s["start"]:s["end"]] == s["value"], s
                    out.write(json.dumps({"id": f"{locale}-{genre}-{k}", "locale": locale, "genre": genre,
                                          "text": text, "spans": doc.spans}, ensure_ascii=False) + "\n")
                    n += 1
    print(f"wrote {n} documents to {args.out}")


if __name__ == "__main__":
    main()
