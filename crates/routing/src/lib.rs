//! Compiles Ingress objects into an immutable routing table (being built).
