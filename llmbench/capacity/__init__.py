"""`llmbench capacity`: the highest load within the SLO, searched by bracketing and bisection."""
