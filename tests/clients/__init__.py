"""The real-client lane (`-m clients`): the agents users run, installed at pinned versions,
configured as their docs say, run against a real `tandem serve`."""
