//! Generates many distinct, reachable functions so the component carries a realistic amount of
//! code for the compiler (a plugin that bundles a SQL client, a template engine and so on).

use std::fmt::Write as _;

const FUNCTIONS: usize = 6800;

fn main() {
    let mut src = String::new();
    for i in 0..FUNCTIONS {
        let (a, b, c) = (i * 7 + 3, i * 13 + 5, i % 61 + 1);
        let _ = write!(
            src,
            "#[inline(never)] fn f{i}(mut x: u64, s: &[u8]) -> u64 {{\n\
             for (k, byte) in s.iter().enumerate() {{\n\
               x = x.rotate_left({c} % 63 + 1) ^ (*byte as u64).wrapping_mul({a});\n\
               if k % {c} == 0 {{ x = x.wrapping_add({b}); }} else {{ x ^= x >> {c} % 31 + 1; }}\n\
               match x % 5 {{ 0 => x = x.wrapping_mul({a} | 1), 1 => x ^= {b}, 2 => x = x.wrapping_sub(k as u64), 3 => x = x.swap_bytes(), _ => x += {c} }}\n\
             }}\n\
             x }}\n"
        );
    }
    src.push_str("static TABLE: &[fn(u64, &[u8]) -> u64] = &[");
    for i in 0..FUNCTIONS {
        let _ = write!(src, "f{i},");
    }
    src.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR set by cargo"));
    std::fs::write(out.join("generated.rs"), src).expect("write generated code");
}
