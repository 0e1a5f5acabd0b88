struct Weather;

impl Weather {
    #[rebuno::tool]
    async fn lookup(&self, city: String) -> Result<String, std::io::Error> {
        Ok(city)
    }
}

fn main() {}
