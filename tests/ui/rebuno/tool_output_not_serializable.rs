struct Forecast;

#[rebuno::tool]
async fn forecast(city: String) -> Result<Forecast, std::io::Error> {
    let _ = city;
    Ok(Forecast)
}

fn main() {}
