//! The arithmetic evaluator behind the `calc` tool: numbers, `+ - * / % ^`,
//! parentheses, and a few functions and constants.

/// Integers print without a fractional part, so `6*7` gives `42`, not `42.0`.
pub fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        value.to_string()
    }
}

/// Evaluate `expression` by recursive descent: the grammar is small enough
/// that a parser crate would cost more than it saves in a tool this size.
///
/// # Errors
///
/// A message saying where the expression is wrong.
pub fn eval(expression: &str) -> Result<f64, String> {
    let mut parser = Parser {
        tokens: expression.chars().filter(|c| !c.is_whitespace()).collect(),
        pos: 0,
    };
    let value = parser.sum()?;
    match parser.peek() {
        None => Ok(value),
        Some(c) => Err(format!("unexpected {c:?} at position {}", parser.pos + 1)),
    }
}

struct Parser {
    tokens: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.tokens.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        self.pos += usize::from(found);
        found
    }

    // sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<f64, String> {
        let mut value = self.product()?;
        loop {
            if self.eat('+') {
                value += self.product()?;
            } else if self.eat('-') {
                value -= self.product()?;
            } else {
                return Ok(value);
            }
        }
    }

    // product := power (('*' | '/' | '%') power)*
    fn product(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        loop {
            if self.eat('*') {
                value *= self.power()?;
            } else if self.eat('/') {
                value /= self.power()?;
            } else if self.eat('%') {
                value %= self.power()?;
            } else {
                return Ok(value);
            }
        }
    }

    // power := unary ('^' power)?   (right-associative)
    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.eat('^') {
            Ok(base.powf(self.power()?))
        } else {
            Ok(base)
        }
    }

    // unary := '-' unary | '+' unary | atom
    fn unary(&mut self) -> Result<f64, String> {
        if self.eat('-') {
            Ok(-self.unary()?)
        } else if self.eat('+') {
            self.unary()
        } else {
            self.atom()
        }
    }

    // atom := number | '(' sum ')' | name '(' sum ')'
    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                let value = self.sum()?;
                if !self.eat(')') {
                    return Err(format!("missing ')' at position {}", self.pos + 1));
                }
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() => self.function(),
            Some(c) => Err(format!("unexpected {c:?} at position {}", self.pos + 1)),
            None => Err("the expression ends too early".into()),
        }
    }

    fn number(&mut self) -> Result<f64, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.pos += 1;
        }
        // Scientific notation: 1e3, 2.5E-4.
        if matches!(self.peek(), Some('e' | 'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.pos += 1;
            }
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        let text: String = self.tokens[start..self.pos].iter().collect();
        text.parse()
            .map_err(|_| format!("{text:?} at position {} is not a number", start + 1))
    }

    fn function(&mut self) -> Result<f64, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric()) {
            self.pos += 1;
        }
        let name: String = self.tokens[start..self.pos].iter().collect();
        match name.as_str() {
            "pi" => return Ok(std::f64::consts::PI),
            "e" => return Ok(std::f64::consts::E),
            _ => {}
        }
        let f: fn(f64) -> f64 = match name.as_str() {
            "sqrt" => f64::sqrt,
            "abs" => f64::abs,
            "ln" => f64::ln,
            "log10" => f64::log10,
            "sin" => f64::sin,
            "cos" => f64::cos,
            "tan" => f64::tan,
            "floor" => f64::floor,
            "ceil" => f64::ceil,
            "round" => f64::round,
            _ => return Err(format!("unknown function or constant {name:?}")),
        };
        if !self.eat('(') {
            return Err(format!("{name} needs parentheses: {name}(x)"));
        }
        let arg = self.sum()?;
        if !self.eat(')') {
            return Err(format!("missing ')' after the argument of {name}"));
        }
        Ok(f(arg))
    }
}

#[cfg(test)]
mod tests {
    use super::{eval, format_number};

    #[test]
    fn evaluates_with_precedence_and_associativity() {
        assert_eq!(eval("6*7").unwrap(), 42.0);
        assert_eq!(eval("2 + 3 * 4").unwrap(), 14.0);
        assert_eq!(eval("2 ^ 3 ^ 2").unwrap(), 512.0);
        assert_eq!(eval("-(1 + 2) * 3").unwrap(), -9.0);
        assert_eq!(eval("sqrt(16) + 1e1").unwrap(), 14.0);
        assert_eq!(eval("7 % 4").unwrap(), 3.0);
    }

    #[test]
    fn reports_where_the_expression_is_wrong() {
        assert_eq!(eval("2 +").unwrap_err(), "the expression ends too early");
        assert_eq!(eval("(1").unwrap_err(), "missing ')' at position 3");
        assert_eq!(
            eval("foo(1)").unwrap_err(),
            "unknown function or constant \"foo\""
        );
        assert_eq!(eval("1)").unwrap_err(), "unexpected ')' at position 2");
    }

    #[test]
    fn integers_print_without_fraction() {
        assert_eq!(format_number(42.0), "42");
        assert_eq!(format_number(0.5), "0.5");
    }
}
