"""What a user can type, one thin module per command: each parses its options, calls one
library function and renders the result. `options` holds what they share; no command imports
another, and none holds logic a library function could."""
