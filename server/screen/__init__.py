"""The Memory screen's files: `index.html`, `screen.js`, `screen.css`, served as they are
by `server/routes/screen.py` (no build step, nothing from a CDN)."""
