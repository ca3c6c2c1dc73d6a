# ruff: noqa: E501  (data: one subject a line)
"""Builds pairs.tsv, the labelled note pairs of the commands bench (issue 60).

Each subject below was written for this bench: a fact, the same fact in other words, another
fact about the same subject, and an update that says in so many words that a value
changed. Each subject makes three pairs (fact then paraphrase: `same`; fact then other
fact: `different`; fact then update: `update`). Run it after editing.
"""

from __future__ import annotations

import csv
from pathlib import Path

# (fact, paraphrase, another fact on the same subject, an update of the fact)
SUBJECTS = [
    ("Ana leads the payments team.", "The payments team is led by Ana.", "The payments team keeps its on-call phone in the red drawer.", "Ana no longer leads the payments team; Bruno leads it now."),
    ("My locker code is 4417.", "The code for my locker is 4417.", "My locker is on the second floor by the showers.", "My locker code is now 5512."),
    ("The staging database listens on port 5433.", "Connect to the staging database on port 5433.", "The staging database is backed up every night at 2am.", "The staging database port is now 6543."),
    ("I am allergic to peanuts.", "Peanuts give me an allergic reaction.", "I am also allergic to cat hair.", "I am no longer allergic to peanuts after the treatment."),
    ("My daughter is called Lila.", "Lila is my daughter's name.", "My daughter goes to Riverside primary school.", "My daughter's name is Lina now, not Lila; we changed it."),
    ("Our main branch is called trunk.", "The main branch in our repo is named trunk.", "Our trunk branch is protected and needs two reviews.", "Our main branch is now called main instead of trunk."),
    ("The team standup is at 9:30.", "We hold the standup at 9:30 every morning.", "The standup happens in the Orion meeting room.", "The team standup is now at 10:00."),
    ("The build server is build-02.internal.", "Builds run on build-02.internal.", "The build server has 64 GB of RAM.", "The build server moved to build-07.internal."),
    ("My manager is Priya.", "Priya is my manager.", "Priya prefers updates by email rather than chat.", "My manager is now Tomas."),
    ("The office wifi is called Tandem-Guest.", "Join the Tandem-Guest network for the office wifi.", "The office wifi password changes every Monday.", "The office wifi is now called Tandem-Staff."),
    ("I live in Lisbon.", "My home is in Lisbon.", "I live near the Alfama district.", "I moved to Porto; I now live there."),
    ("My bike is a blue Brompton.", "I ride a blue Brompton bike.", "My bike is locked in the basement at night.", "My bike is now a red Tern; I sold the Brompton."),
    ("The API rate limit is 100 requests a minute.", "We allow 100 API requests per minute.", "The API rate limit is enforced per key, not per IP.", "The API rate limit is now 200 requests a minute."),
    ("The wiki lives at wiki.example.org.", "Our wiki is hosted at wiki.example.org.", "The wiki needs a VPN connection from home.", "The wiki moved to wiki.internal.example.org."),
    ("My flat number is 4B.", "I live in flat 4B.", "My flat has a balcony facing south.", "My flat number is now 7C after the renumbering."),
    ("We use pnpm in this repo.", "This repository uses pnpm as its package manager.", "The repo pins pnpm through the packageManager field.", "We switched to npm from pnpm in this repo."),
    ("The backup job runs at 2am.", "Backups start every night at 2am.", "The backup job writes to the s3 bucket tandem-backups.", "The backup job now runs at 3am."),
    ("My favourite editor is Helix.", "I prefer the Helix editor.", "Helix is configured with the catppuccin theme on my laptop.", "My favourite editor is now Zed instead of Helix."),
    ("My birthday is on May 3rd.", "I was born on May 3rd.", "I celebrate my birthday with a dinner at Casa Nova.", "Correction: my birthday is on May 13th, not May 3rd."),
    ("The cat's vet is Dr. Moreau.", "Dr. Moreau is our cat's vet.", "Dr. Moreau's clinic closes at 6pm on Saturdays.", "The cat's vet is now Dr. Alvarez."),
    ("I take my coffee black.", "I drink coffee black, without milk.", "I drink two cups of coffee before noon.", "I now take my coffee with oat milk."),
    ("The VPN password rotates every 90 days.", "Every 90 days the VPN password changes.", "The VPN client is WireGuard.", "The VPN password now rotates every 30 days."),
    ("Deploys are frozen on Fridays.", "No deploys on Fridays.", "Deploys need a ticket in the CHANGE queue.", "Deploys are no longer frozen on Fridays; Thursdays are frozen instead."),
    ("I am using Python 3.11 on this machine.", "This machine runs Python 3.11.", "This machine uses pyenv to manage Python versions.", "This machine now runs Python 3.12."),
    ("The client wants all units in metric.", "Use metric units for everything the client sees.", "The client wants dates written as YYYY-MM-DD.", "The client now wants imperial units instead of metric."),
    ("The invoice template lives in /srv/templates/invoice.html.", "Find the invoice template at /srv/templates/invoice.html.", "The invoice template uses Jinja2 syntax.", "The invoice template moved to /srv/templates/v2/invoice.html."),
    ("My phone number is 555-0142.", "You can reach me at 555-0142.", "My phone is on silent during meetings.", "My phone number is now 555-0199."),
    ("The Postgres superuser is admin_root.", "admin_root is the Postgres superuser.", "The Postgres superuser can only log in from localhost.", "The Postgres superuser was renamed to pg_admin."),
    ("My partner is vegetarian.", "My partner does not eat meat.", "My partner works as a nurse.", "My partner is now vegan, not just vegetarian."),
    ("I work night shifts.", "My shifts are at night.", "I work at the Saint Mary hospital.", "I now work day shifts."),
    ("The dog is called Biscuit.", "Our dog's name is Biscuit.", "The dog is walked at 7am and 7pm.", "We renamed the dog; Biscuit is now called Crumble."),
    ("The production cluster runs in eu-west-1.", "Production runs in the eu-west-1 region.", "The production cluster has six nodes.", "The production cluster moved to eu-central-1."),
    ("The sprint length is two weeks.", "Our sprints last two weeks.", "Sprint planning happens on Mondays.", "The sprint length is now three weeks."),
    ("The support email is help@example.com.", "Customers write to help@example.com for support.", "Support answers within one business day.", "The support email is now support@example.com."),
    ("I prefer answers in bullet points.", "Give me answers as bullet points.", "I prefer short answers without preambles.", "I now prefer answers in full paragraphs instead of bullet points."),
    ("The test suite takes 36 minutes in CI.", "CI runs the tests in 36 minutes.", "The test suite runs on two cores in CI.", "The test suite now takes 28 minutes in CI."),
    ("My car is a grey Corolla.", "I drive a grey Corolla.", "My car is parked in spot 14.", "My car is now a white Civic."),
    ("The logs are kept for 14 days.", "We keep logs for 14 days.", "The logs are shipped to Loki.", "The logs are now kept for 30 days."),
    ("The design review is on Wednesdays.", "We hold design reviews every Wednesday.", "The design review needs a one-page doc sent a day before.", "The design review moved to Tuesdays."),
    ("My gym membership ends in March.", "The gym membership runs until March.", "My gym is the one on Baker Street.", "My gym membership now ends in June after the renewal."),
    ("The default timeout is 30 seconds.", "Requests time out after 30 seconds by default.", "The timeout can be set per request with the timeout field.", "The default timeout is now 60 seconds."),
    ("Maria owns the billing service.", "The billing service belongs to Maria.", "The billing service is written in Go.", "Maria no longer owns the billing service; Kenji owns it now."),
    ("The cache TTL is 5 minutes.", "Cached entries live for 5 minutes.", "The cache is a Redis instance on cache-01.", "The cache TTL is now 10 minutes."),
    ("I speak Portuguese and English.", "My languages are Portuguese and English.", "I am learning Japanese on weekends.", "I now also speak Spanish fluently."),
    ("The release train leaves every Thursday.", "We release every Thursday.", "A release needs a green nightly build.", "The release train now leaves every Tuesday."),
    ("The monitoring dashboard is grafana.example.org.", "Dashboards are at grafana.example.org.", "The monitoring dashboard alerts the on-call by SMS.", "The monitoring dashboard moved to grafana.internal.example.org."),
    ("My son plays the violin.", "My son is a violinist.", "My son has lessons on Tuesdays.", "My son switched from the violin to the cello."),
    ("Lunch is at 12:30.", "We eat lunch at 12:30.", "Lunch is in the canteen on the third floor.", "Lunch is now at 13:00."),
    ("The SSH port on bastion is 2222.", "Bastion listens for SSH on port 2222.", "The bastion only accepts keys, no passwords.", "The SSH port on bastion is now 2200."),
    ("The marketing site is built with Hugo.", "We build the marketing site with Hugo.", "The marketing site deploys from the site branch.", "The marketing site is now built with Astro instead of Hugo."),
    ("I am colour-blind.", "I have colour blindness.", "I cannot tell red from green.", "After the new glasses I am no longer bothered by colour blindness at work."),
    ("The max upload size is 10 MB.", "Uploads are capped at 10 MB.", "Uploads are scanned for viruses.", "The max upload size is now 25 MB."),
    ("My sister lives in Toronto.", "Toronto is where my sister lives.", "My sister is a teacher.", "My sister moved to Vancouver."),
    ("The on-call rotation is weekly.", "On-call rotates every week.", "On-call handover is on Monday at noon.", "The on-call rotation is now every two weeks."),
    ("The company fiscal year starts in April.", "Our fiscal year begins in April.", "Budgets are due in February.", "The company fiscal year now starts in January."),
    ("The frontend uses React 18.", "Our frontend is on React 18.", "The frontend uses Vite for bundling.", "The frontend is now on React 19."),
    ("My favourite tea is sencha.", "I like sencha best among teas.", "I brew my tea at 70 degrees.", "My favourite tea is now genmaicha."),
    ("The office closes at 7pm.", "The office shuts at 7pm.", "The office is closed on public holidays.", "The office now closes at 8pm."),
    ("The feature flag service is Unleash.", "We use Unleash for feature flags.", "Feature flags are cleaned up every quarter.", "The feature flag service is now LaunchDarkly instead of Unleash."),
    ("My dentist is Dr. Okafor.", "Dr. Okafor is my dentist.", "My dentist appointment is every six months.", "My dentist is now Dr. Lindqvist."),
    ("The staging URL is staging.example.com.", "Staging is served at staging.example.com.", "Staging is reset every Sunday night.", "The staging URL is now stage.example.com."),
    ("The kids' school starts at 8:15.", "School starts at 8:15 for the kids.", "The kids take the number 12 bus to school.", "The kids' school now starts at 8:40."),
    ("The minimum password length is 12.", "Passwords need at least 12 characters.", "Passwords must include a number.", "The minimum password length is now 16."),
    ("Our Slack channel for incidents is #inc.", "Incidents are handled in the #inc Slack channel.", "The #inc channel pages the on-call engineer.", "Our Slack channel for incidents is now #incidents."),
    ("My running goal is 20 km a week.", "I aim to run 20 km each week.", "I run on the river path.", "My running goal is now 30 km a week."),
    ("The data warehouse is BigQuery.", "We keep analytics data in BigQuery.", "The data warehouse is loaded by Airflow every hour.", "The data warehouse moved to Snowflake instead of BigQuery."),
    ("The printer on floor two is called Gutenberg.", "Gutenberg is the floor two printer.", "Gutenberg jams with thick paper.", "The printer on floor two is now called Caxton."),
    ("I am training for the Berlin marathon.", "My training is for the Berlin marathon.", "My marathon pace target is 5:10 per km.", "I am now training for the Chicago marathon instead of Berlin."),
    ("The error budget is 0.1 percent a month.", "We allow 0.1 percent errors per month.", "The error budget is reviewed at the monthly SLO meeting.", "The error budget is now 0.5 percent a month."),
    ("Code reviews need one approval.", "One approval is enough to merge.", "Code reviews should be done within a day.", "Code reviews now need two approvals."),
]


def main() -> None:
    out = Path(__file__).with_name("pairs.tsv")
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n",
                            quoting=csv.QUOTE_NONE)
        writer.writerow(["label", "first_title", "first_body", "second_title", "second_body"])
        for fact, same, other, update in SUBJECTS:
            for label, second in (("same", same), ("different", other), ("update", update)):
                writer.writerow([label, _title(fact), fact, _title(second), second])


def _title(sentence: str) -> str:
    return sentence.rstrip(".")[:120]


if __name__ == "__main__":
    main()
