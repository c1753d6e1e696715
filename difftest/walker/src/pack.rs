// The MessagePack the walker answers in: arrays, byte strings and integers, nothing else.

/// An output buffer of MessagePack values (strings as the `str` family, which a reader that keeps
/// raw bytes reads as bytes, as it reads cmsgpack's).
#[derive(Default)]
pub struct Packer {
    out: Vec<u8>,
}

impl Packer {
    pub fn array(&mut self, len: usize) {
        if len < 16 {
            self.out.push(0x90 | len as u8);
        } else if len <= 0xffff {
            self.out.push(0xdc);
            self.out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.out.push(0xdd);
            self.out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }

    pub fn bytes(&mut self, data: &[u8]) {
        let len = data.len();
        if len < 32 {
            self.out.push(0xa0 | len as u8);
        } else if len <= 0xff {
            self.out.push(0xd9);
            self.out.push(len as u8);
        } else if len <= 0xffff {
            self.out.push(0xda);
            self.out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            self.out.push(0xdb);
            self.out.extend_from_slice(&(len as u32).to_be_bytes());
        }
        self.out.extend_from_slice(data);
    }

    pub fn integer(&mut self, value: i64) {
        if (0..128).contains(&value) {
            self.out.push(value as u8);
        } else if (-32..0).contains(&value) {
            self.out.push(value as i8 as u8);
        } else {
            self.out.push(0xd3);
            self.out.extend_from_slice(&value.to_be_bytes());
        }
    }

    pub fn finish(self) -> Vec<u8> {
        self.out
    }
}
