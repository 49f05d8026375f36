//! SASL and TLS, as a client of a leader and on the serve listener.

mod certificates;
mod sasl;
mod sasl_scramp;
mod serve_sasl;
mod tls;
