"""Reports render what the analyzers computed: terminal tables now; HTML and Markdown later."""
