// The HELLOs the Unix socket's accept loop answers by itself (acceptor.cpp), as Python would
// (fenceline.ipc.server, Connection._hello, which keeps the rules: the fields, the features a
// service knows, the reply). The loop only recognises the bodies it may answer; any other goes
// to Python, which answers it, or refuses it with the error it makes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fl {

// Reads one HELLO body, written as fenceline's clients write it (no spaces).
class HelloReader {
 public:
  HelloReader(const std::uint8_t *body, std::size_t n) : p_(body), end_(body + n) {}

  // Which of `known` the body asks for, as bits (bit i: known[i]), when it is {} (or empty)
  // or an object of "client" (a string) and "features" (a list of at most max_features
  // strings), each at most once, in either order, every string printable ASCII without quotes
  // or backslashes. Names it does not know are left out, as Python does. -1: any other body.
  // `name` (if given) gets the client's name when the body names one.
  long features(const std::vector<std::string> &known, std::size_t max_features,
                std::string *name = nullptr) {
    if (p_ == end_) return 0;
    long mask = 0;
    bool client = false, features = false;
    if (!eat('{')) return -1;
    if (eat('}')) return p_ == end_ ? 0 : -1;
    do {
      const char *key = nullptr;
      std::size_t len = 0;
      if (!string(&key, &len) || !eat(':')) return -1;
      if (is(key, len, "client") && !client) {
        client = true;
        if (!string(&key, &len)) return -1;
        if (name) name->assign(key, len);
      } else if (is(key, len, "features") && !features) {
        features = true;
        if (!eat('[')) return -1;
        std::size_t count = 0;
        if (!eat(']')) {
          do {
            if (!string(&key, &len) || ++count > max_features) return -1;
            for (std::size_t i = 0; i < known.size(); ++i)
              if (is(key, len, known[i].c_str())) mask |= 1L << i;
          } while (eat(','));
          if (!eat(']')) return -1;
        }
      } else {
        return -1;
      }
    } while (eat(','));
    return eat('}') && p_ == end_ ? mask : -1;
  }

 private:
  bool eat(char c) {
    if (p_ == end_ || *p_ != static_cast<std::uint8_t>(c)) return false;
    ++p_;
    return true;
  }

  bool string(const char **s, std::size_t *len) {
    if (!eat('"')) return false;
    const std::uint8_t *start = p_;
    while (p_ != end_ && *p_ != '"') {
      if (*p_ < 0x20 || *p_ > 0x7e || *p_ == '\\') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    *s = reinterpret_cast<const char *>(start);
    *len = static_cast<std::size_t>(p_ - start);
    ++p_;
    return true;
  }

  static bool is(const char *s, std::size_t len, const char *name) {
    return std::strlen(name) == len && std::memcmp(s, name, len) == 0;
  }

  const std::uint8_t *p_, *end_;
};

}  // namespace fl
