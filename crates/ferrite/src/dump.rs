//! dump (todo)
