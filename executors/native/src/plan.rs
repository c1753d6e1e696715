//! A planned write: the command, its byte arguments, and the reply it must give (its prediction).

use crate::reply::Reply;

/// What a planned write must answer; anything else means the keyspace moved under the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Exactly this integer (ZREM of a present member: 1; HINCRBY: the predicted value).
    Int(i64),
    /// Some integer (HSET's count of new fields, ZADD's count of new members).
    AnyInt,
    /// ZPOPMIN's [member, score] with this member.
    Popped(Vec<u8>),
}

impl Expect {
    pub fn matches(&self, reply: &Reply) -> bool {
        match (self, reply) {
            (Expect::Int(want), Reply::Int(got)) => want == got,
            (Expect::AnyInt, Reply::Int(_)) => true,
            (Expect::Popped(id), Reply::Array(items)) => {
                items.len() == 2 && items.first() == Some(&Reply::Bulk(id.clone()))
            }
            _ => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub cmd: &'static str,
    pub args: Vec<Vec<u8>>,
    pub expect: Expect,
}

pub fn op(cmd: &'static str, args: &[&[u8]], expect: Expect) -> Op {
    Op {
        cmd,
        args: args.iter().map(|a| a.to_vec()).collect(),
        expect,
    }
}

/// A score or counter as the decimal bytes the server stores.
pub fn num(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_match_only_their_reply() {
        assert!(Expect::Int(1).matches(&Reply::Int(1)));
        assert!(!Expect::Int(1).matches(&Reply::Int(0)));
        assert!(!Expect::Int(1).matches(&Reply::Bulk(b"1".to_vec())));
        assert!(Expect::AnyInt.matches(&Reply::Int(0)));
        assert!(!Expect::AnyInt.matches(&Reply::Null));
        let popped = Reply::Array(vec![
            Reply::Bulk(b"j\0".to_vec()),
            Reply::Bulk(b"5".to_vec()),
        ]);
        assert!(Expect::Popped(b"j\0".to_vec()).matches(&popped));
        assert!(!Expect::Popped(b"j".to_vec()).matches(&popped));
        assert!(!Expect::Popped(b"j".to_vec()).matches(&Reply::Array(vec![])));
        assert_eq!(num(-5), b"-5");
    }
}
