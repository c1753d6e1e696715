//! The MessagePack the walker answers in: arrays, byte strings and integers, nothing else.

/// The most bytes an array header takes (0xdd and a four-byte count): the room a body keeps in
/// front of itself for the header its count, known only at the end, calls for.
const HEADER_ROOM: usize = 5;

/// An output buffer of MessagePack values (strings as the `str` family, which a reader that keeps
/// raw bytes reads as bytes, as it reads cmsgpack's).
#[derive(Default)]
pub struct Packer {
    out: Vec<u8>,
}

/// The header of an array of `len` elements, in the smallest encoding, and how many bytes it takes.
fn array_header(len: usize) -> ([u8; HEADER_ROOM], usize) {
    let mut header = [0; HEADER_ROOM];
    if len < 16 {
        header[0] = 0x90 | len as u8;
        (header, 1)
    } else if len <= 0xffff {
        header[0] = 0xdc;
        header[1..3].copy_from_slice(&(len as u16).to_be_bytes());
        (header, 3)
    } else {
        header[0] = 0xdd;
        header[1..5].copy_from_slice(&(len as u32).to_be_bytes());
        (header, 5)
    }
}

impl Packer {
    /// An empty packer (a const, for a buffer kept in a static).
    pub const fn new() -> Self {
        Packer { out: Vec::new() }
    }

    /// Writes an array's header: its `len` elements follow.
    pub fn array(&mut self, len: usize) {
        let (header, used) = array_header(len);
        self.out.extend_from_slice(&header[..used]);
    }

    /// Writes a byte string.
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

    /// Writes an integer.
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

    /// Writes values another packer holds, as they are.
    pub fn packed(&mut self, other: &Packer) {
        self.out.extend_from_slice(&other.out);
    }

    /// How many bytes the buffer holds (where the next value starts).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// The bytes written since `start` (a `len` taken earlier).
    pub fn since(&self, start: usize) -> &[u8] {
        self.out.get(start..).unwrap_or_default()
    }

    /// Empties the buffer, keeping its allocation for the next values.
    pub fn clear(&mut self) {
        self.out.clear();
    }

    /// Empties the buffer and starts a body: the elements of an array whose count comes at the end
    /// (`with_array_header`), for which it keeps room in front.
    pub fn start_body(&mut self) {
        self.out.clear();
        self.out.resize(HEADER_ROOM, 0);
    }

    /// The body since `start_body` under the header of an array of `len` elements: the same bytes
    /// as `array(len)` and then the body, without moving the body.
    pub fn with_array_header(&mut self, len: usize) -> &[u8] {
        let (header, used) = array_header(len);
        let start = HEADER_ROOM - used;
        match self.out.get_mut(start..HEADER_ROOM) {
            Some(room) => room.copy_from_slice(&header[..used]),
            None => return &[], // no body was started: unreachable, and no panic
        }
        self.out.get(start..).unwrap_or_default()
    }

    /// Lets go of the buffer's allocation when it grew past `keep` bytes (a walk of a big keyspace
    /// should not hold its memory until the next walk).
    pub fn shrink_past(&mut self, keep: usize) {
        if self.out.capacity() > keep {
            self.out = Vec::new();
        }
    }
}
